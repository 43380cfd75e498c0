-- The floor's worker (pgbench script): claims and completes up to :batch
-- jobs in one transaction, oldest first, skipping rows other workers hold,
-- and receives their payloads. With batch=1 this is
--   DELETE FROM q WHERE id = (SELECT id FROM q ORDER BY id
--                             FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING ...
-- When the queue was empty (got stays 0) the client sleeps :idle_ms before
-- its next try, as a polling worker would. Run with -D batch=N -D idle_ms=MS.
\set got 0
DELETE FROM bench_floor.q
 WHERE id = ANY (ARRAY(SELECT id FROM bench_floor.q ORDER BY id FOR UPDATE SKIP LOCKED LIMIT :batch))
RETURNING id, payload, 1 AS got \aset
\if :got = 0
\sleep :idle_ms ms
\endif

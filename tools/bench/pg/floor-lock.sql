-- The at-least-once floor's worker (pgbench script): what any queue whose
-- jobs survive a worker dying must do per job, at the least, in berth's own
-- shape (a worker's completions ride with its next claim). Each
-- transaction deletes the rows the client claimed last time whose token
-- still matches (its completions), then claims up to :batch jobs, oldest
-- first, skipping rows other workers hold or have locked: a lock expiry, a
-- token and a claim count are written, the payloads received. A worker
-- that dies leaves its jobs to come back when their lock expires. The lock
-- is not indexed, so the claim's update may stay on its page (HOT) and no
-- index gets an entry: the cheapest layout there is, bought with a scan
-- that filters every locked row at the head of the queue (cheap here: at
-- most workers x batch are locked at once; a queue with many long locks
-- could not afford it). When nothing was claimed the client sleeps
-- :idle_ms. Run with -D batch=N -D idle_ms=MS -D "pairs=(0,'')".
\set got 0
BEGIN;
DELETE FROM bench_floor.q WHERE (id, token) IN (:pairs);
WITH c AS (
  UPDATE bench_floor.q
     SET locked_until = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 30000,
         token = md5(random()::text), claims = claims + 1
   WHERE id = ANY (ARRAY(SELECT id FROM bench_floor.q
                          WHERE locked_until < (extract(epoch FROM now()) * 1000)::bigint
                          ORDER BY id FOR UPDATE SKIP LOCKED LIMIT :batch))
  RETURNING id, token, payload)
SELECT count(*) AS got, coalesce(string_agg(format('(%s,%L)', id, token), ','), '(0,'''')') AS pairs,
       sum(length(payload)) AS bytes
  FROM c \gset
COMMIT;
\if :got = 0
\sleep :idle_ms ms
\endif

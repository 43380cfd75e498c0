-- statements.sql: the statements berth prepares on its engine connection,
-- one per `-- name: NAME` marker (pg/pgstmt.c parses them at start; a name
-- given twice is refused there). Embedded at build by pg/embed.cmake.
--
-- Parameters and results are binary (pg/pgwire.c): every parameter carries
-- its type as a cast, since the statements are prepared without parameter
-- types. Times are bigint Unix ms, ids uuid, `now` is berth.now_ms() (the
-- turn's clock). Every statement runs inside a turn (BEGIN; turn_begin;
-- ...; COMMIT, READ COMMITTED). The task path's statements (submit,
-- claim1, claimk, guard_read, tasks_delete, tasks_update,
-- incidents_insert, topics_due) are proven against a server by
-- tests/pg/test_ops.c; the actor reads their results by position, so a
-- change of a parameter or result column is a change of pg/pgactor.c too.
-- Later increments add the other operations' statements (pg/README.md §3).

-- name: turn_begin
-- The turn's clock and deployment epoch (§3.0); $1: the manual clock or NULL.
-- berth.turn_begin() (002_turn.sql) written out as plain SQL: the same
-- answer without a plpgsql call in every turn. A manual clock is set for
-- the transaction only (set_config(..., true)), so berth.now_ms() answers
-- it in every statement of the turn and the next turn starts clean.
SELECT CASE WHEN $1::bigint IS NULL
            THEN (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
            ELSE set_config('berth.clock_ms', $1::bigint::text, true)::bigint END AS now_ms,
       coalesce((SELECT value::bigint FROM berth.meta WHERE key = 'deploy_epoch'), 0)
         AS deploy_epoch;

-- name: turn_notify
-- The turn's one doorbell (§5.1), last before COMMIT.
SELECT pg_notify('berth', $1::text);

-- name: tasks_insert
-- Plain tasks from parallel arrays (ids, topics, payloads), at the turn's now.
-- For the turn tests until submit (§3.1) lands.
INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, retries_left,
                         body_bytes, payload)
SELECT u.id, u.topic, 0, berth.now_ms(), berth.now_ms(), 0, length(u.payload), u.payload
  FROM unnest($1::uuid[], $2::text[], $3::bytea[]) AS u(id, topic, payload)
RETURNING id, created_at;

-- name: tasks_count
-- Live and terminal tasks of a topic.
SELECT count(*) FROM berth.tasks WHERE topic = $1::text;

-- name: submit
-- Every plain submit of the turn in one statement (§3.1, R1, R17), routed
-- by the replica (refusals never reach it). One element per item in each array; the item's number is its 1-based place.
--   $1 uuid[] ids (the caller's), $2 text[] topics, $3 bytea[] payloads,
--   $4 text[] every item's headers flattened, name,value,name,value...,
--   $5 int4[] hdr_start: 1-based index into $4 of the item's first name (any
--      value, NULL too, when its count is 0), $6 int4[] hdr_count: the
--      item's TEXT ELEMENTS in $4 (2 x its headers), $7 text[] content types
--      (NULL: none), $8 text[] idempotency keys (NULL: no key), $9 int8[]
--      delay_ms (NULL: none), $10 int8[] not_before, Unix ms (NULL: none),
--   $11 int8[] priorities, $12 int4[] body_bytes, $13 int8 the dedup
--   horizon ms, $14 int4 retries (the failure budget: retries_left), $15
--   int4[] the deployment each item was routed to (0: the implicit one;
--   pg/pgdeploy.h: the turn's turn_begin_routed proves the routes current;
--   -1: refused by its route, kept only if its key was accepted within the
--   horizon, which it then answers, as a duplicate), $16 bool[] whether
--   that is a push channel: the item is its delivery (an outbox row, due
--   when the task would be fetchable), not a task.
-- available_at = greatest(now, now + delay_ms, else not_before, else now);
-- created_at = now. A key is a berth.submit_keys row ('s', topic, key):
-- inserted, or, when its row is past the horizon (at <= now - horizon),
-- taken over (id, at replaced); within it the row is kept and names the
-- earlier task, even one completed since (a duplicate answering the old
-- id). The row is written either way, so a second replica submitting the
-- same key waits for the first's commit, then reads its id. Keys are
-- written in (topic, key) order (no deadlock between replicas). The caller
-- folds repeats of a key within one turn first: each (topic, key) at most
-- once per call (ON CONFLICT DO UPDATE cannot touch a row twice). A task
-- row is inserted for an item without a key or whose own id won; seq
-- follows the item order.
-- Result, one row per item, in no particular order (sort by no):
--   no int4 (1-based), winner uuid: NULL without a key; else the id the key
--   names now: the item's own id = new, another = duplicate of that task.
WITH items AS (
  SELECT u.* FROM unnest($1::uuid[], $2::text[], $3::bytea[], $5::int4[], $6::int4[],
                         $7::text[], $8::text[], $9::int8[], $10::int8[], $11::int8[],
                         $12::int4[], $15::int4[], $16::bool[]) WITH ORDINALITY
                  AS u(id, topic, payload, hs, hc, ct, key, delay_ms, not_before, prio,
                       bytes, dep, push, no)),
 keyed AS (
  INSERT INTO berth.submit_keys AS k (kind, topic, key, id, at)
  SELECT 's', i.topic, i.key, i.id, berth.now_ms() FROM items i
   WHERE i.key IS NOT NULL AND i.dep >= 0 ORDER BY i.topic, i.key
  ON CONFLICT (kind, topic, key) DO UPDATE
    SET id = CASE WHEN k.at <= berth.now_ms() - $13::int8 THEN excluded.id ELSE k.id END,
        at = CASE WHEN k.at <= berth.now_ms() - $13::int8 THEN excluded.at ELSE k.at END
  RETURNING k.topic, k.key, k.id),
 prior AS (  -- refused by its route: a duplicate only of a key accepted within the horizon
  SELECT i.no, k.id FROM items i
    JOIN berth.submit_keys k ON k.kind = 's' AND k.topic = i.topic AND k.key = i.key
   WHERE i.dep < 0 AND k.at > berth.now_ms() - $13::int8),
 ins AS (
  INSERT INTO berth.tasks (id, topic, deployment, priority, created_at, available_at,
                           retries_left, content_type, headers, body_bytes, payload)
  SELECT i.id, i.topic, i.dep, i.prio, berth.now_ms(),
         greatest(berth.now_ms(),
                  coalesce(berth.now_ms() + i.delay_ms, i.not_before, berth.now_ms())),
         $14::int4, i.ct,
         CASE WHEN i.hc > 0 THEN ($4::text[])[i.hs : i.hs + i.hc - 1] ELSE '{}' END,
         i.bytes, i.payload
    FROM items i LEFT JOIN keyed k ON k.topic = i.topic AND k.key = i.key
   WHERE i.dep >= 0 AND NOT i.push AND (i.key IS NULL OR k.id = i.id)
   ORDER BY i.no),
 outq AS (
  INSERT INTO berth.outbox (id, topic, deployment, priority, created_at, due_at, content_type,
                            headers, body_bytes, payload)
  SELECT i.id, i.topic, i.dep, i.prio, berth.now_ms(),
         greatest(berth.now_ms(),
                  coalesce(berth.now_ms() + i.delay_ms, i.not_before, berth.now_ms())),
         i.ct, CASE WHEN i.hc > 0 THEN ($4::text[])[i.hs : i.hs + i.hc - 1] ELSE '{}' END,
         i.bytes, i.payload
    FROM items i LEFT JOIN keyed k ON k.topic = i.topic AND k.key = i.key
   WHERE i.dep >= 0 AND i.push AND (i.key IS NULL OR k.id = i.id)
   ORDER BY i.no)
SELECT i.no::int4 AS no, coalesce(k.id, p.id) AS winner
  FROM items i LEFT JOIN keyed k ON k.topic = i.topic AND k.key = i.key
  LEFT JOIN prior p ON p.no = i.no;

-- name: claim1
-- The claim on one topic (§3.4, R5): the most urgent fetchable tasks, by
-- priority, then fetchable_at, then seq (tasks_claim's order: an ordered
-- index scan, LockRows under Limit). Rows other turns hold locked are
-- skipped, not waited for; a row another turn claimed and committed after
-- this statement's snapshot is re-checked on its new version (EPQ: the
-- predicate is in the locking query) and dropped. The first row is always
-- taken, later ones while the running sum of body_bytes <= max_bytes; rows
-- locked past the budget are not updated (their locks end at COMMIT).
--   $1 text topic, $2 int4 n, $3 int8 lock_ms, $4 text worker_id,
--   $5 int8 max_bytes.
-- Each taken row gets lock_expires_at = now + lock_ms, the worker, a fresh
-- lock_token, claims + 1.
-- Result, one row per task taken, in no particular order (sort by k):
--   k int8 (1-based rank in claim order), id uuid, topic text, lock_token
--   uuid, lock_expires_at int8, claims int4, retries_left int4, available_at
--   int8, created_at int8, priority int8, instance_id uuid (NULL: not a
--   call's), call_attempt int4 (NULL), content_type text (NULL), headers
--   text[], body_bytes int4, payload bytea.
WITH c AS (SELECT id, priority, fetchable_at, seq, body_bytes FROM berth.tasks
            WHERE topic = $1::text AND NOT terminal AND fetchable_at <= berth.now_ms()
            ORDER BY priority, fetchable_at, seq LIMIT $2::int4 FOR UPDATE SKIP LOCKED),
     w AS (SELECT c.*, sum(body_bytes) OVER (ORDER BY priority, fetchable_at, seq) AS run,
                  row_number() OVER (ORDER BY priority, fetchable_at, seq) AS k FROM c)
UPDATE berth.tasks t SET lock_expires_at = berth.now_ms() + $3::int8, worker_id = $4::text,
       lock_token = gen_random_uuid(), claims = t.claims + 1
  FROM w WHERE t.id = w.id AND (w.k = 1 OR w.run <= $5::int8)
    AND t.id = ANY (ARRAY(SELECT id FROM w)) -- (the rows by their key, whatever the statistics)
RETURNING w.k, t.id, t.topic, t.lock_token, t.lock_expires_at, t.claims, t.retries_left,
          t.available_at, t.created_at, t.priority, t.instance_id, t.call_attempt,
          t.content_type, t.headers, t.body_bytes, t.payload;

-- name: claim_many
-- claim1 for several fetches of one turn naming the same one topic, in one
-- statement: their tasks are claimed together, in claim order, and dealt
-- out in the order the fetches are given (the first takes its n, the next
-- the n after, ...); each fetch's byte budget is its own (its first task
-- always taken). A fetch dealt fewer than its n, or none, got what there
-- was.
--   $1 text topic, $2 int4[] n per fetch, $3 int8[] lock_ms per fetch,
--   $4 text[] worker_id per fetch, $5 int8 max_bytes (each fetch's).
-- Result: i int4 (the fetch's place in the arrays, 1-based), then claim1's
-- columns (k the task's rank within its fetch).
WITH f AS (SELECT f.n, f.lock_ms, f.worker, f.i::int4 AS i,
                  sum(f.n) OVER (ORDER BY f.i) - f.n AS before
             FROM unnest($2::int4[], $3::int8[], $4::text[]) WITH ORDINALITY
                  AS f(n, lock_ms, worker, i)),
     c AS (SELECT id, priority, fetchable_at, seq, body_bytes FROM berth.tasks
            WHERE topic = $1::text AND NOT terminal AND fetchable_at <= berth.now_ms()
            ORDER BY priority, fetchable_at, seq
            LIMIT (SELECT sum(n) FROM f) FOR UPDATE SKIP LOCKED),
     r AS (SELECT c.*, row_number() OVER (ORDER BY priority, fetchable_at, seq) AS pos FROM c),
     w AS (SELECT r.*, f.i, f.lock_ms, f.worker, r.pos - f.before AS k,
                  sum(r.body_bytes) OVER (PARTITION BY f.i ORDER BY r.pos) AS run
             FROM r JOIN f ON r.pos > f.before AND r.pos <= f.before + f.n)
UPDATE berth.tasks t SET lock_expires_at = berth.now_ms() + w.lock_ms, worker_id = w.worker,
       lock_token = gen_random_uuid(), claims = t.claims + 1
  FROM w WHERE t.id = w.id AND (w.k = 1 OR w.run <= $5::int8)
    AND t.id = ANY (ARRAY(SELECT id FROM w)) -- (the rows by their key, whatever the statistics)
RETURNING w.i, w.k, t.id, t.topic, t.lock_token, t.lock_expires_at, t.claims, t.retries_left,
          t.available_at, t.created_at, t.priority, t.instance_id, t.call_attempt,
          t.content_type, t.headers, t.body_bytes, t.payload;

-- name: claimk
-- claim1 over several topics (§3.4): per topic its n most urgent fetchable
-- tasks (a LATERAL ordered scan of tasks_claim each), merged in claim
-- order, the first 2n kept as candidates, then locked in that order with
-- the predicate restated (EPQ re-checks it; FOR UPDATE cannot follow a
-- UNION, hence LATERAL) and SKIP LOCKED; the byte budget and the update
-- as claim1. Candidates are read without locks: if it takes fewer than n
-- while some candidates were ready, others took them (the caller may look
-- again in the same turn).
--   $1 text[] topics, $2 int4 n, $3 int8 lock_ms, $4 text worker_id,
--   $5 int8 max_bytes.
-- Result: claim1's columns.
WITH cand AS (SELECT x.id FROM unnest($1::text[]) AS tp(name) CROSS JOIN LATERAL
               (SELECT id, priority, fetchable_at, seq FROM berth.tasks
                 WHERE topic = tp.name AND NOT terminal AND fetchable_at <= berth.now_ms()
                 ORDER BY priority, fetchable_at, seq LIMIT $2::int4) x
              ORDER BY x.priority, x.fetchable_at, x.seq LIMIT $2::int4 * 2),
     c AS (SELECT id, priority, fetchable_at, seq, body_bytes FROM berth.tasks
            WHERE id = ANY (ARRAY(SELECT id FROM cand)) AND NOT terminal
              AND fetchable_at <= berth.now_ms()
            ORDER BY priority, fetchable_at, seq LIMIT $2::int4 FOR UPDATE SKIP LOCKED),
     w AS (SELECT c.*, sum(body_bytes) OVER (ORDER BY priority, fetchable_at, seq) AS run,
                  row_number() OVER (ORDER BY priority, fetchable_at, seq) AS k FROM c)
UPDATE berth.tasks t SET lock_expires_at = berth.now_ms() + $3::int8, worker_id = $4::text,
       lock_token = gen_random_uuid(), claims = t.claims + 1
  FROM w WHERE t.id = w.id AND (w.k = 1 OR w.run <= $5::int8)
    AND t.id = ANY (ARRAY(SELECT id FROM w)) -- (the rows by their key, whatever the statistics)
RETURNING w.k, t.id, t.topic, t.lock_token, t.lock_expires_at, t.claims, t.retries_left,
          t.available_at, t.created_at, t.priority, t.instance_id, t.call_attempt,
          t.content_type, t.headers, t.body_bytes, t.payload;

-- name: guard_read
-- RTT1 of the guarded requests (§3.3, R8): every guarded task of the turn,
-- read and locked (FOR UPDATE, in id order: no deadlock between replicas)
-- until COMMIT, so what the rules decide from them cannot change under
-- them. A row updated by a turn that committed meanwhile is read as it is
-- now; one deleted meanwhile is absent (NOT_FOUND).
--   $1 uuid[] ids, sorted and distinct.
-- Result, one row per id found, in id order: id uuid, topic text, terminal
--   bool, worker_id text, lock_token uuid, lock_expires_at int8 (NULL:
--   never claimed), claims int4, failures int4, retries_left int4,
--   available_at int8, created_at int8, priority int8, instance_id uuid,
--   call_attempt int4, err_code text, err_message text, err_details text
--   (those six NULL when unset), deployment int4 (its declaration checks a
--   reply: R10, R15).
SELECT id, topic, terminal, worker_id, lock_token, lock_expires_at, claims, failures,
       retries_left, available_at, created_at, priority, instance_id, call_attempt,
       err_code, err_message, err_details, deployment
  FROM berth.tasks WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE;

-- name: complete_fast
-- A turn whose guarded requests are all completions without a result
-- (S1's and S2's workers) in one round (pgguard.h, ONE ROUND): the tasks
-- whose live lock the completion holds are deleted here; every other id
-- that names a task is returned with its lock state as this statement's
-- snapshot saw it, from which C gives the verdict (R8: lock state only).
-- A completion the rules must look at twice fails the statement through
-- berth.guard_undecided() (SQLSTATE BR001), so the turn keeps nothing and
-- is run again the two-round way: a call's task (its call is correlated),
-- or a lock that passes in the snapshot but that a turn which committed
-- since has changed (the delete's re-check dropped it).
-- Written so that no plan depends on the table's statistics (S1 leaves
-- tasks nearly empty of live rows and full of dead ones): both scans are
-- `id = ANY` on the primary key, the lock is matched through a hashed
-- subplan, and the second scan reads only the ids not deleted (usually
-- none). `terminal IS NOT TRUE`, not `NOT terminal`: the partial indexes'
-- predicate would draw the delete to scan one of them whole.
--   $1 uuid[] ids (distinct), $2 uuid[] lock tokens, $3 text[] worker ids,
--   one element per completion.
-- Result, one row per id that names a task: id uuid, deleted bool, topic
--   text, then (not deleted) terminal bool, worker_id text, lock_token
--   uuid, lock_expires_at int8 (NULL when never claimed); undecided; then
--   (deleted) created_at int8, for the task's latency.
WITH g AS (SELECT u.id, u.token, u.worker
             FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS u(id, token, worker)),
     d AS (DELETE FROM berth.tasks t
            WHERE t.id = ANY($1::uuid[]) AND t.terminal IS NOT TRUE
              AND t.lock_expires_at > berth.now_ms() AND t.instance_id IS NULL
              AND ((t.id, t.lock_token, t.worker_id) IN (SELECT id, token, worker FROM g)) IS TRUE
            RETURNING t.id, t.topic, t.created_at)
SELECT id, true AS deleted, topic, NULL::boolean AS terminal, NULL::text AS worker_id,
       NULL::uuid AS lock_token, NULL::int8 AS lock_expires_at, NULL::boolean AS undecided,
       created_at
  FROM d
UNION ALL
SELECT t.id, false, t.topic, t.terminal, t.worker_id, t.lock_token, t.lock_expires_at,
       CASE WHEN NOT t.terminal AND t.lock_expires_at > berth.now_ms()
                 AND ((t.id, t.lock_token, t.worker_id) IN (SELECT id, token, worker FROM g)) IS TRUE
            THEN berth.guard_undecided() END,
       NULL::int8
  FROM berth.tasks t
 WHERE t.id = ANY (ARRAY(SELECT x FROM unnest($1::uuid[]) AS x
                          WHERE (x IN (SELECT id FROM d)) IS NOT TRUE));

-- name: tasks_delete
-- R9: the tasks a turn completed (dispatched) or refused away; ids not
-- there are no error. $1 uuid[] ids. No rows (a command).
DELETE FROM berth.tasks WHERE id = ANY($1::uuid[]);

-- name: tasks_update
-- RTT2's outcomes of fail, extend_lock, release, a refused intake's retake
-- (§3.3), one element per task: the row's new lock and schedule, budget and
-- state, and its error. fetchable_at follows (generated).
--   $1 uuid[] ids (distinct), $2 int8[] lock_expires_at (NULL element: no
--   lock), $3 int8[] available_at, $4 int4[] retries_left, $5 int4[]
--   failures, $6 bool[] terminal, $7 text[] err_code, $8 text[]
--   err_message, $9 text[] err_details, $10 bool[] set_err (false: the
--   row's error columns are kept and $7..$9 ignored).
-- No rows (a command).
UPDATE berth.tasks t
   SET lock_expires_at = u.lx, available_at = u.av, retries_left = u.rl, failures = u.f,
       terminal = u.term,
       err_code = CASE WHEN u.se THEN u.ec ELSE t.err_code END,
       err_message = CASE WHEN u.se THEN u.em ELSE t.err_message END,
       err_details = CASE WHEN u.se THEN u.ed ELSE t.err_details END
  FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::int4[], $5::int4[], $6::bool[],
              $7::text[], $8::text[], $9::text[], $10::bool[])
       AS u(id, lx, av, rl, f, term, ec, em, ed, se)
 WHERE t.id = u.id;

-- name: incidents_insert
-- The turn's incidents (a task gone terminal...), at the turn's now, seq
-- in the order given.
--   $1 int4[] kind (stored smallint: pgwire has no int2), $2 uuid[] ref,
--   $3 text[] topic, $4 text[] code, $5 text[] message.
-- No rows (a command).
INSERT INTO berth.incidents (at, kind, ref, topic, code, message)
SELECT berth.now_ms(), u.kind::smallint, u.ref, u.topic, u.code, u.message
  FROM unnest($1::int4[], $2::uuid[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY
       AS u(kind, ref, topic, code, message, no)
 ORDER BY u.no;

-- name: topics_due
-- For long polls (§5.3), after a claim came back empty: per topic, when
-- its next task may become fetchable, and whether fetchable work is there
-- now (rows a SKIP LOCKED claim passed over: another turn's claim in
-- flight; look again shortly). Two probes of tasks_due per topic, each the
-- first index entry past a bound (min() over the index order): `ready` is
-- "the least fetchable_at <= now", not an EXISTS, which the planner would
-- answer with a sequential scan hoping to meet a match early.
--   $1 text[] topics.
-- Result, one row per topic given, in no particular order: topic text,
--   next_due int8 (the least fetchable_at > now among the topic's live
--   tasks; NULL: none), ready bool (a live task with fetchable_at <= now).
SELECT tp.name AS topic,
       (SELECT min(d.fetchable_at) FROM berth.tasks d
         WHERE d.topic = tp.name AND NOT d.terminal AND d.fetchable_at > berth.now_ms())
         AS next_due,
       coalesce((SELECT min(r.fetchable_at) FROM berth.tasks r
                  WHERE r.topic = tp.name AND NOT r.terminal) <= berth.now_ms(), false) AS ready
  FROM unnest($1::text[]) AS tp(name);

-- name: stats
-- The tasks of every topic by state at the turn's now, as the embedded
-- engine counts them (a scan: the operator's STATS, never a hot path).
-- Result, one row per topic: topic text, ready int8, locked int8, backoff
-- int8, delayed int8 (never claimed, not fetchable yet), terminal int8.
WITH n AS (SELECT berth.now_ms() AS now)
SELECT t.topic,
       count(*) FILTER (WHERE NOT t.terminal AND NOT coalesce(t.lock_expires_at > n.now, false)
                          AND t.available_at <= n.now) AS ready,
       count(*) FILTER (WHERE NOT t.terminal AND t.lock_expires_at > n.now) AS locked,
       count(*) FILTER (WHERE NOT t.terminal AND NOT coalesce(t.lock_expires_at > n.now, false)
                          AND t.available_at > n.now AND t.claims > 0) AS backoff,
       count(*) FILTER (WHERE NOT t.terminal AND NOT coalesce(t.lock_expires_at > n.now, false)
                          AND t.available_at > n.now AND t.claims = 0) AS delayed,
       count(*) FILTER (WHERE t.terminal) AS terminal
  FROM berth.tasks t, n GROUP BY t.topic ORDER BY t.topic;

-- name: calls_stats
-- STATS' one-row counts: the live calls by state (a scan of the live
-- ones), the deployment versions by state (at most ENGINE_DEPLOYMENTS_MAX),
-- the outbox's pending and poisoned deliveries (index counts).
-- Result: one row: waiting int8, backoff int8, deployments live int8,
-- draining int8, retired int8, outbox pending int8, poisoned int8.
SELECT (SELECT count(*) FROM berth.instances WHERE ended_at IS NULL AND state = 1) AS waiting,
       (SELECT count(*) FROM berth.instances WHERE ended_at IS NULL AND state = 2) AS backoff,
       (SELECT count(*) FROM berth.deployments WHERE state = 1) AS live,
       (SELECT count(*) FROM berth.deployments WHERE state = 2) AS draining,
       (SELECT count(*) FROM berth.deployments WHERE state = 3) AS retired,
       (SELECT count(*) FROM berth.outbox WHERE NOT poisoned) AS pending,
       (SELECT count(*) FROM berth.outbox WHERE poisoned) AS poisoned;

-- name: turn_fail
-- Fails the turn it is in (the engine's write failpoint, tests): $1 int4
-- 0, a division by zero at execution, so the transaction keeps nothing.
SELECT 1 / $1::int4;

-- name: task_get
-- One task as the operator sees it (GET_TASK), its state at the turn's now
-- (berth.task_state(), 005_operator.sql: as the embedded engine tells it).
--   $1 uuid id.
-- Result, no row or one: topic text, state int4, worker_id text (NULL:
-- never claimed), lock_expires_at int8 (NULL), available_at int8, claims
-- int4, retries_left int4, failures int4, err_code text, err_message text,
-- err_details text, created_at int8, priority int8, payload_bytes int4;
-- and what the operator sees of the body: content_type text, headers
-- text[], the payload's first 4096 bytes (ENGINE_TASK_INFO_PAYLOAD_MAX).
SELECT t.topic,
       berth.task_state(t.terminal, t.lock_expires_at, t.available_at, t.claims,
                        berth.now_ms())::int4 AS state,
       t.worker_id, t.lock_expires_at, t.available_at, t.claims, t.retries_left, t.failures,
       t.err_code, t.err_message, t.err_details, t.created_at, t.priority,
       octet_length(t.payload)::int4 AS payload_bytes,
       t.content_type, t.headers, substring(t.payload FROM 1 FOR 4096) AS payload_shown
  FROM berth.tasks t WHERE t.id = $1::uuid;

-- name: tasks_list
-- A page of the operator's listing (LIST_TASKS), in sequence order as the
-- embedded store lists: it looks at the next $5 tasks after where it
-- starts (the page's bound, RULES_LIST_SCAN_FACTOR times its limit) and
-- keeps up to $6 of those that pass the filters. It starts after sequence
-- $3, or after the task $4 (which must be there: `found`).
--   $1 text topic (NULL: every topic), $2 int4 state (0: every state),
--   $3 int8 after sequence (-1: from the first), $4 uuid after this task
--   (NULL: $3), $5 int4 tasks to look at, $6 int4 limit.
-- Result, one row and more: found bool (where it starts is known), last
-- int8 (the sequence of the last task looked at: the next page's start;
-- NULL: none looked at), more bool (tasks after last), then, NULL in the
-- first row when none passed, the task: id uuid, then task_get's columns
-- up to payload_bytes.
WITH a AS (SELECT CASE WHEN $4::uuid IS NULL THEN $3::int8
                       ELSE (SELECT x.seq FROM berth.tasks x WHERE x.id = $4::uuid) END AS from_seq),
     s AS MATERIALIZED (
       SELECT t.id, t.seq, t.topic,
              berth.task_state(t.terminal, t.lock_expires_at, t.available_at, t.claims,
                               berth.now_ms())::int4 AS state,
              t.worker_id, t.lock_expires_at, t.available_at, t.claims, t.retries_left,
              t.failures, t.err_code, t.err_message, t.err_details, t.created_at, t.priority,
              octet_length(t.payload)::int4 AS payload_bytes
         FROM berth.tasks t
        WHERE t.seq > (SELECT from_seq FROM a)
        ORDER BY t.seq LIMIT $5::int4),
     m AS (SELECT * FROM s
            WHERE ($1::text IS NULL OR s.topic = $1::text) AND ($2::int4 = 0 OR s.state = $2::int4)
            ORDER BY s.seq LIMIT $6::int4),
     e AS (SELECT (SELECT from_seq FROM a) IS NOT NULL AS found,
                  CASE WHEN (SELECT count(*) FROM m) >= $6::int4 THEN (SELECT max(seq) FROM m)
                       ELSE (SELECT max(seq) FROM s) END AS last)
SELECT e.found, e.last,
       (SELECT y.seq FROM berth.tasks y WHERE y.seq > e.last ORDER BY y.seq LIMIT 1) IS NOT NULL
         AS more,
       m.id, m.topic, m.state, m.worker_id, m.lock_expires_at, m.available_at, m.claims,
       m.retries_left, m.failures, m.err_code, m.err_message, m.err_details, m.created_at,
       m.priority, m.payload_bytes
  FROM e LEFT JOIN m ON true
 ORDER BY m.seq;

-- name: tasks_retry
-- RETRY_TERMINAL: a terminal task fetchable again at the turn's now with
-- a new failure budget, as the embedded store retries it; its deployment,
-- if RETIRED, drains again (the turn holds K_DEPLOY shared: the gate
-- waits for it).
--   $1 uuid id, $2 int4 retries_left.
-- Result, one row: topic text (NULL: not retried), was int4 (NULL: no such
-- task; 0 it is not terminal; 1 it was), redrained int8 (the new deploy
-- epoch when its deployment drains again; NULL: it did not).
WITH u AS (UPDATE berth.tasks
              SET terminal = false, available_at = berth.now_ms(), lock_expires_at = berth.now_ms(),
                  retries_left = $2::int4
            WHERE id = $1::uuid AND terminal
           RETURNING topic, deployment),
     r AS (UPDATE berth.deployments d SET state = 2, retired_at = NULL
            WHERE d.number = (SELECT deployment FROM u) AND d.state = 3
           RETURNING d.number)
SELECT (SELECT topic FROM u) AS topic,
       (SELECT x.terminal::int4 FROM berth.tasks x WHERE x.id = $1::uuid) AS was,
       (SELECT berth.deploy_epoch_bump() FROM r) AS redrained;

-- name: tasks_discard
-- DISCARD_TERMINAL: a terminal task goes. A call's task that is its
-- call's attempt in flight ends the call FAILED (DISCARDED), as the
-- embedded store ends it.
--   $1 uuid id, $2 text the call's error message.
-- Result, one row: topic text (NULL: not discarded), was int4 (as
-- tasks_retry's), instance uuid (the call that ended; NULL: none),
-- instance_topic text.
WITH d AS (DELETE FROM berth.tasks WHERE id = $1::uuid AND terminal
           RETURNING topic, instance_id),
     i AS (UPDATE berth.instances n
              SET state = 4, ended_at = berth.now_ms(), timer_at = NULL, err_code = 'DISCARDED',
                  err_message = $2::text, err_details = NULL, request_payload = NULL,
                  request_headers = NULL
            WHERE n.id = (SELECT instance_id FROM d) AND n.state = 1 AND n.ended_at IS NULL
              AND n.current = $1::uuid
           RETURNING n.id, n.topic)
SELECT (SELECT topic FROM d) AS topic,
       (SELECT x.terminal::int4 FROM berth.tasks x WHERE x.id = $1::uuid) AS was,
       (SELECT id FROM i) AS instance, (SELECT topic FROM i) AS instance_topic;

-- name: incidents_list
-- The operator's incidents in the order they happened (LIST_INCIDENTS), a
-- page after (at, seq); an incident's id is its at and seq, 8 bytes each,
-- big-endian, as the embedded store keys them. Each says whether it is
-- still open (engine_incident.open: the task still terminal, the delivery
-- still poisoned; a refused result never); $4 keeps only those.
--   $1 int8 after_at, $2 int8 after_seq ((-1, -1): from the first),
--   $3 int4 limit, $4 bool open only.
-- Result: at int8, seq int8, kind int4, ref uuid, topic text, code text,
-- message text, open bool.
SELECT s.* FROM (
  SELECT i.at, i.seq, i.kind::int4, i.ref, i.topic, i.code, i.message,
         -- (scalar lookups by key, one per record: never a hashed scan)
         CASE i.kind
           WHEN 2 THEN coalesce((SELECT t.terminal FROM berth.tasks t WHERE t.id = i.ref), false)
           WHEN 1 THEN coalesce((SELECT o.poisoned FROM berth.outbox o WHERE o.id = i.ref), false)
           ELSE false END AS open
    FROM berth.incidents i WHERE (i.at, i.seq) > ($1::int8, $2::int8)) s
 WHERE s.open OR NOT $4::bool
 ORDER BY s.at, s.seq LIMIT $3::int4;

-- ---- calls (pg/README.md §3.2, §3.6, §3.7) ----------------------------

-- name: call
-- Every call of the turn in one statement (§3.2): per item its key ('c'),
-- its instance and its first attempt's task, as submit's CTE shape does
-- for tasks. The instance and task ids come from the caller.
--   $1 uuid[] instance ids, $2 uuid[] task ids, $3 text[] topics, $4
--   bytea[] payloads, $5 text[] headers flattened, $6 int4[] hdr_start, $7
--   int4[] hdr_count (as submit's), $8 text[] content types, $9 text[]
--   keys, $10 int8[] delay_ms, $11 int8[] not_before, $12 int8[]
--   priorities, $13 int4[] body_bytes, $14 int8[] timeout_ms (NULL: no
--   policy, no timer), $15 int4[] max_attempts, $16 int8[] initial backoff,
--   $17 int8[] max backoff, $18 text[] multipliers (float8 as text), $19
--   text[] non-retryable codes flattened, $20 int4[] code_start, $21 int4[]
--   code_count, $22 int8 the dedup horizon ms, $23 int4 retries, $24
--   int4[] the deployment each call was routed to (as submit's $15, -1
--   included), $25 bool[] a push channel (as submit's $16: the attempt's
--   request is an outbox row).
-- An attempt's time runs from when its task is fetchable: timer_at =
-- available_at + timeout_ms. The request is kept for later attempts only
-- when max_attempts > 1.
-- Result, one row per item: no int4, winner uuid (NULL without a key; the
-- instance the key names: the item's own = new, another = duplicate).
WITH items AS (
  SELECT u.* FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $6::int4[], $7::int4[],
                         $8::text[], $9::text[], $10::int8[], $11::int8[], $12::int8[],
                         $13::int4[], $14::int8[], $15::int4[], $16::int8[], $17::int8[],
                         $18::text[], $20::int4[], $21::int4[], $24::int4[], $25::bool[])
                  WITH ORDINALITY
                  AS u(iid, tid, topic, payload, hs, hc, ct, key, delay_ms, not_before, prio,
                       bytes, timeout_ms, attempts, ib, mb, mult, cs, cc, dep, push, no)),
 keyed AS (
  INSERT INTO berth.submit_keys AS k (kind, topic, key, id, at)
  SELECT 'c', i.topic, i.key, i.iid, berth.now_ms() FROM items i
   WHERE i.key IS NOT NULL AND i.dep >= 0 ORDER BY i.topic, i.key
  ON CONFLICT (kind, topic, key) DO UPDATE
    SET id = CASE WHEN k.at <= berth.now_ms() - $22::int8 THEN excluded.id ELSE k.id END,
        at = CASE WHEN k.at <= berth.now_ms() - $22::int8 THEN excluded.at ELSE k.at END
  RETURNING k.topic, k.key, k.id),
 prior AS (  -- refused by its route: a duplicate only of a key accepted within the horizon
  SELECT i.no, k.id FROM items i
    JOIN berth.submit_keys k ON k.kind = 'c' AND k.topic = i.topic AND k.key = i.key
   WHERE i.dep < 0 AND k.at > berth.now_ms() - $22::int8),
 won AS (
  SELECT i.*, greatest(berth.now_ms(), coalesce(berth.now_ms() + i.delay_ms, i.not_before,
                                                 berth.now_ms())) AS avail,
         CASE WHEN i.hc > 0 THEN ($5::text[])[i.hs : i.hs + i.hc - 1] ELSE '{}' END AS headers
    FROM items i LEFT JOIN keyed k ON k.topic = i.topic AND k.key = i.key
   WHERE i.dep >= 0 AND (i.key IS NULL OR k.id = i.iid)),
 inst AS (
  INSERT INTO berth.instances (id, topic, deployment, state, attempt, max_attempts, timeout_ms,
                               initial_backoff_ms, max_backoff_ms, multiplier, non_retryable,
                               request_payload, request_headers, request_content_type,
                               request_priority, current, timer_at, created_at, key_topic, key)
  SELECT w.iid, w.topic, w.dep, 1, 1, w.attempts, w.timeout_ms, w.ib, w.mb, w.mult::float8,
         CASE WHEN w.cc > 0 THEN ($19::text[])[w.cs : w.cs + w.cc - 1] ELSE '{}' END,
         CASE WHEN w.attempts > 1 THEN w.payload END, CASE WHEN w.attempts > 1 THEN w.headers END,
         CASE WHEN w.attempts > 1 THEN w.ct END, CASE WHEN w.attempts > 1 THEN w.prio END,
         w.tid, w.avail + w.timeout_ms, berth.now_ms(),
         CASE WHEN w.key IS NOT NULL THEN w.topic END, w.key
    FROM won w),
 ins AS (
  INSERT INTO berth.tasks (id, topic, deployment, priority, created_at, available_at,
                           retries_left, instance_id, call_attempt, content_type, headers,
                           body_bytes, payload)
  SELECT w.tid, w.topic, w.dep, w.prio, berth.now_ms(), w.avail, $23::int4, w.iid, 1, w.ct,
         w.headers, w.bytes, w.payload
    FROM won w WHERE NOT w.push ORDER BY w.no),
 outq AS (
  INSERT INTO berth.outbox (id, topic, deployment, priority, created_at, due_at, instance_id,
                            call_attempt, content_type, headers, body_bytes, payload)
  SELECT w.tid, w.topic, w.dep, w.prio, berth.now_ms(), w.avail, w.iid, 1, w.ct, w.headers,
         w.bytes, w.payload
    FROM won w WHERE w.push ORDER BY w.no)
SELECT i.no::int4 AS no, coalesce(k.id, p.id) AS winner
  FROM items i LEFT JOIN keyed k ON k.topic = i.topic AND k.key = i.key
  LEFT JOIN prior p ON p.no = i.no;

-- name: instances_lock
-- Round one beside guard_read (§3.6): the instances of the calls whose
-- tasks the turn's replies name, or whose deliveries its push answers
-- name, locked in id order AFTER guard_read and outbox_ack have locked
-- the tasks and deliveries (the order everywhere: tasks and deliveries,
-- then instances; a timer, which goes the other way, skips locked rows).
-- An instance dropped by its retention is absent.
--   $1 uuid[] task ids (guard_read's), $2 uuid[] delivery ids (outbox_ack's).
-- Result, one row per instance: id uuid, state int4 (1 WAITING, 2
-- BACKOFF, 3 RESOLVED, 4 FAILED), attempt int4, ended bool, current uuid
-- (NULL), topic text, then its policy: max_attempts int4, timeout_ms int8
-- (NULL), initial_backoff_ms int8, max_backoff_ms int8, multiplier text,
-- non_retryable text[].
SELECT i.id, i.state::int4, i.attempt, i.ended_at IS NOT NULL AS ended, i.current, i.topic,
       i.max_attempts, i.timeout_ms, i.initial_backoff_ms, i.max_backoff_ms,
       i.multiplier::text, i.non_retryable
  FROM berth.instances i
 WHERE i.id IN (SELECT t.instance_id FROM berth.tasks t
                 WHERE t.id = ANY($1::uuid[]) AND t.instance_id IS NOT NULL
                UNION ALL
                SELECT o.instance_id FROM berth.outbox o
                 WHERE o.id = ANY($2::uuid[]) AND o.instance_id IS NOT NULL)
 ORDER BY i.id FOR UPDATE OF i;

-- name: timers_due
-- A housekeeping turn's first round (§3.6): the calls whose timer came,
-- the earliest first, at most $1, locked; rows another turn holds are
-- skipped (whichever replica's tick comes first fires a timer, never two).
-- A call whose request (a push channel's delivery) was poisoned has its
-- timer set to then (outbox_write): its attempt failed, poisoned_why says
-- why.
-- Result: id uuid, state int4, attempt int4, max_attempts int4, timeout_ms
-- int8 (NULL), initial_backoff_ms int8, max_backoff_ms int8, multiplier
-- text, current uuid (NULL), topic text, poisoned_why text (NULL: the
-- attempt's time ran out, or a backoff ended).
SELECT i.id, i.state::int4, i.attempt, i.max_attempts, i.timeout_ms, i.initial_backoff_ms,
       i.max_backoff_ms, i.multiplier::text, i.current, i.topic,
       (SELECT coalesce(o.err_message, '') FROM berth.outbox o
         WHERE o.id = i.current AND o.poisoned) AS poisoned_why
  FROM berth.instances i WHERE i.timer_at <= berth.now_ms()
 ORDER BY i.timer_at LIMIT $1::int4 FOR UPDATE OF i SKIP LOCKED;

-- name: tasks_withdraw
-- The dead attempts' tasks (§3.6): each goes unless a worker holds its
-- lock now, or another turn holds its row (it is held: a completion or a
-- claim in flight); a terminal one goes too. A push channel's request
-- (its outbox row) goes too, in flight or not (a late answer then finds
-- nothing), unless another turn holds it (an answer in flight) or it is
-- poisoned (kept for the operator, as a terminal task would be). $1
-- uuid[] ids.
-- Result: id uuid, topic text (the tasks that went).
WITH o AS (DELETE FROM berth.outbox WHERE id = ANY (ARRAY(
             SELECT id FROM berth.outbox WHERE id = ANY($1::uuid[]) AND NOT poisoned
                FOR UPDATE SKIP LOCKED))
           RETURNING 1)
DELETE FROM berth.tasks WHERE id IN (
  SELECT id FROM berth.tasks WHERE id = ANY($1::uuid[])
     AND NOT coalesce(lock_expires_at > berth.now_ms(), false)
     FOR UPDATE SKIP LOCKED)
RETURNING id, topic;

-- name: redrive_insert
-- The next attempts (§3.6): a fresh task per call from its kept request,
-- fetchable now, with a fresh failure budget, in the call's deployment (a
-- call with an attempt left holds it: the gate cannot retire it between).
--   $1 uuid[] instance ids, $2 uuid[] new task ids, $3 int4[] attempts,
--   $4 int4 retries.
-- A call to a push channel (its deployment's push_names) gets an outbox
-- row, due now, instead.
-- Result: instance uuid of each task or delivery inserted (a call whose
-- request was not kept is absent), push bool.
WITH n AS (
  SELECT u.tid, i.topic, i.deployment, coalesce(i.request_priority, 0) AS prio, i.id AS iid,
         u.attempt, i.request_content_type AS ct, coalesce(i.request_headers, '{}') AS headers,
         16 + octet_length(i.request_payload) + octet_length(i.topic)
            + coalesce(octet_length(i.request_content_type), 0)
            + coalesce((SELECT sum(octet_length(h) + 1) FROM unnest(i.request_headers) h), 0)
           AS bytes,
         i.request_payload AS payload,
         coalesce(i.topic = ANY (d.push_names), false) AS push
    FROM unnest($1::uuid[], $2::uuid[], $3::int4[]) AS u(iid, tid, attempt)
    JOIN berth.instances i ON i.id = u.iid
    LEFT JOIN berth.deployments d ON d.number = i.deployment
   WHERE i.request_payload IS NOT NULL),
 t AS (
  INSERT INTO berth.tasks (id, topic, deployment, priority, created_at, available_at,
                           retries_left, instance_id, call_attempt, content_type, headers,
                           body_bytes, payload)
  SELECT n.tid, n.topic, n.deployment, n.prio, berth.now_ms(), berth.now_ms(), $4::int4, n.iid,
         n.attempt, n.ct, n.headers, n.bytes, n.payload
    FROM n WHERE NOT n.push),
 o AS (
  INSERT INTO berth.outbox (id, topic, deployment, priority, created_at, due_at, instance_id,
                            call_attempt, content_type, headers, body_bytes, payload)
  SELECT n.tid, n.topic, n.deployment, n.prio, berth.now_ms(), berth.now_ms(), n.iid,
         n.attempt, n.ct, n.headers, n.bytes, n.payload
    FROM n WHERE n.push)
SELECT n.iid AS instance_id, n.push FROM n;

-- name: instances_write
-- What the turn did to its calls (§3.6), one element per instance: its
-- state, attempt, current task and timer, and, ended, when and how. A
-- result taken from a task or a delivery (a completion or a push answer
-- without a result re-delivers the request's payload) is read before the
-- turn deletes it: this statement goes before tasks_delete and
-- outbox_write. An ended call's request goes.
--   $1 uuid[] ids, $2 int4[] state, $3 int4[] attempt, $4 uuid[] current,
--   $5 int8[] timer_at (NULL: none), $6 bool[] ended, $7 bytea[] result
--   payload (NULL: no result), $8 text[] result content type, $9 text[]
--   result headers flattened, $10 int4[] rh_start, $11 int4[] rh_count,
--   $12 uuid[] result from this task (NULL: from $7..), $13 text[]
--   err_code, $14 text[] err_message, $15 text[] err_details.
-- No rows (a command).
UPDATE berth.instances i
   SET state = u.state::smallint, attempt = u.attempt, current = u.cur, timer_at = u.timer_at,
       ended_at = CASE WHEN u.ended THEN berth.now_ms() END,
       result_payload = CASE WHEN u.src IS NOT NULL
                             THEN coalesce((SELECT t.payload FROM berth.tasks t WHERE t.id = u.src),
                                           (SELECT o.payload FROM berth.outbox o
                                             WHERE o.id = u.src))
                             ELSE u.rp END,
       result_content_type = CASE WHEN u.src IS NOT NULL
                                  THEN coalesce((SELECT t.content_type FROM berth.tasks t
                                                  WHERE t.id = u.src),
                                                (SELECT o.content_type FROM berth.outbox o
                                                  WHERE o.id = u.src))
                                  ELSE u.rct END,
       result_headers = CASE WHEN u.rhc > 0 THEN ($9::text[])[u.rhs : u.rhs + u.rhc - 1] END,
       err_code = u.ec, err_message = u.em, err_details = u.ed,
       request_payload = CASE WHEN u.ended THEN NULL ELSE i.request_payload END,
       request_headers = CASE WHEN u.ended THEN NULL ELSE i.request_headers END
  FROM unnest($1::uuid[], $2::int4[], $3::int4[], $4::uuid[], $5::int8[], $6::bool[],
              $7::bytea[], $8::text[], $10::int4[], $11::int4[], $12::uuid[], $13::text[],
              $14::text[], $15::text[])
       AS u(id, state, attempt, cur, timer_at, ended, rp, rct, rhs, rhc, src, ec, em, ed)
 WHERE i.id = u.id;

-- name: await_read
-- await_call (§3.7): the calls awaited in the turn, as they stand after
-- the turn's own writes. $1 uuid[] ids.
-- Result, one row per id found: id uuid, state int4, attempt int4,
-- created_at int8, ended_at int8 (NULL: live), result_payload bytea (NULL:
-- none), result_content_type text, result_headers text[] (NULL),
-- err_code, err_message, err_details text.
SELECT id, state::int4, attempt, created_at, ended_at, result_payload, result_content_type,
       result_headers, err_code, err_message, err_details
  FROM berth.instances WHERE id = ANY($1::uuid[]);

-- name: instances_drop
-- Retention (§3.6): ended calls older than $1 ms, the oldest first, at
-- most $2, with their key when it still names them.
-- Result: one row, dropped int8.
WITH d AS (DELETE FROM berth.instances WHERE id = ANY (ARRAY(
             SELECT id FROM berth.instances WHERE ended_at <= berth.now_ms() - $1::int8
              ORDER BY ended_at LIMIT $2::int4 FOR UPDATE SKIP LOCKED))
           RETURNING id, key_topic, key),
     k AS (DELETE FROM berth.submit_keys s USING d
            WHERE s.kind = 'c' AND s.topic = d.key_topic AND s.key = d.key AND s.id = d.id
           RETURNING 1)
SELECT count(*)::int8 AS dropped FROM d;

-- name: keys_expire
-- Dedup expiry (§3.6): keys past the horizon ($1 ms), which readers
-- already treat as absent, go; at most $2, the oldest first; and push
-- answers counted in the inbox (pgrelay.h) as long ago.
-- Result: one row, expired int8.
WITH d AS (DELETE FROM berth.submit_keys WHERE ctid = ANY (ARRAY( -- (locked: they stay put)
             SELECT ctid FROM berth.submit_keys WHERE at <= berth.now_ms() - $1::int8
              ORDER BY at LIMIT $2::int4 FOR UPDATE SKIP LOCKED))
           RETURNING 1),
     b AS (DELETE FROM berth.inbox WHERE ctid = ANY (ARRAY(
             SELECT ctid FROM berth.inbox WHERE at <= berth.now_ms() - $1::int8
              ORDER BY at LIMIT $2::int4 FOR UPDATE SKIP LOCKED))
           RETURNING 1)
SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM b)::int8 AS expired;

-- name: housekeeping_next
-- The end of a housekeeping turn: when the next is due, each part on the
-- turn's clock (NULL: nothing waits), and that clock.
--   $1 int8 retention ms, $2 int8 dedup horizon ms.
-- Result: one row: timer int8, drop_at int8, expire_at int8, now int8.
SELECT (SELECT min(timer_at) FROM berth.instances WHERE timer_at IS NOT NULL) AS timer,
       (SELECT min(ended_at) FROM berth.instances WHERE ended_at IS NOT NULL) + $1::int8
         AS drop_at,
       least((SELECT min(at) FROM berth.submit_keys), (SELECT min(at) FROM berth.inbox))
         + $2::int8 + 1 AS expire_at,
       berth.now_ms() AS now;

-- name: turn_begin_routed
-- turn_begin for a turn planned with the replica's deployments (pg/pgdeploy.h):
-- $1 the clock (as turn_begin), $2 int8 the deploy epoch the turn was
-- planned with (NULL: no check), $3 bool take K_DEPLOY shared (the turn
-- puts work into a deployment). A different epoch fails the turn with
-- SQLSTATE BR002 before it keeps anything (006_deploy.sql).
-- The plpgsql check runs only to lock or to fail: an epoch that matches
-- without the lock is read here in plain SQL.
SELECT CASE WHEN $1::bigint IS NULL
            THEN (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
            ELSE set_config('berth.clock_ms', $1::bigint::text, true)::bigint END AS now_ms,
       CASE WHEN $3::bool OR e.v <> coalesce($2::bigint, e.v)
            THEN berth.deploy_epoch_check($2::bigint, $3::bool) ELSE e.v END AS deploy_epoch
  FROM (SELECT coalesce((SELECT value::bigint FROM berth.meta WHERE key = 'deploy_epoch'), 0)
                 AS v) e;

-- name: deployments_read
-- The replica's deployments: the epoch, then every deployment in number
-- order (one snapshot; no deployment: one row, its columns NULL).
--   Result: epoch int8, number int4, id text, version int4, state int4,
--   created_at int8, retired_at int8 (NULL), decl bytea.
SELECT e.epoch, d.number, d.id, d.version, d.state::int4, d.created_at, d.retired_at, d.decl
  FROM (SELECT berth.deploy_epoch() AS epoch) e
  LEFT JOIN berth.deployments d ON true
 ORDER BY d.number;

-- name: deploy_lock
-- A deploy's or retire's first round: K_DEPLOY exclusive, the epoch checked
-- ($1 int8, NULL: none), every deployment (006_deploy.sql's deploy_lock).
--   Result: number int4, id text, version int4, state int4, created_at
--   int8, retired_at int8, decl bytea, named bool.
SELECT * FROM berth.deploy_lock($1::bigint);

-- name: deployment_insert
-- A new version: $1 int4 number, $2 text id, $3 int4 version, $4 int4
-- state, $5 int8 created_at, $6 int8 retired_at (NULL), $7 text[] names,
-- $8 bytea decl, $9 text[] the names of its push channels.
INSERT INTO berth.deployments (number, id, version, state, created_at, retired_at, names, decl,
                               push_names)
VALUES ($1::int4, $2::text, $3::int4, $4::int4, $5::int8, $6::int8, $7::text[], $8::bytea,
        $9::text[]);

-- name: deployments_write
-- What a deploy's turn changed: $1 int4[] numbers, $2 int4[] their states,
-- $3 int8[] their retired_at (NULL), $4 int4[] the numbers forgotten.
-- The epoch is bumped (the turn inserted or changed something).
--   Result: epoch int8.
WITH f AS (DELETE FROM berth.deployments WHERE number = ANY($4::int4[])),
     u AS (UPDATE berth.deployments d SET state = s.state, retired_at = s.ret
             FROM unnest($1::int4[], $2::int4[], $3::int8[]) AS s(number, state, ret)
            WHERE d.number = s.number)
SELECT berth.deploy_epoch_bump() AS epoch;

-- name: deploy_gate
-- The retirement gate (006_deploy.sql): $1 bool wait for K_DEPLOY (a turn
-- that holds nothing else) or only take it if free.
--   Result, one row per deployment retired: number int4, id text, version int4.
SELECT * FROM berth.deploy_gate($1::bool);

-- name: deploy_stale
-- Fails the turn with BR002: a task named a deployment the replica has not
-- read yet (it reads them again, then plans the turn anew).
SELECT berth.deploy_epoch_check(-1, false);

-- name: deployments_list
-- LIST_DEPLOYMENTS, and a deploy's or retire's answer: $1 int4[] the
-- numbers (NULL: every deployment), with what each holds (index probes).
--   Result: number int4, id text, version int4, state int4, created_at
--   int8, retired_at int8, decl bytea, then int8 counts: pending
--   deliveries, tasks (not terminal), calls backing off, terminal tasks,
--   poisoned deliveries, calls with an attempt left.
SELECT d.number, d.id, d.version, d.state::int4, d.created_at, d.retired_at, d.decl,
       (SELECT count(*) FROM berth.outbox o
         WHERE o.deployment = d.number AND o.deployment <> 0 AND NOT o.poisoned),
       (SELECT count(*) FROM berth.tasks t
         WHERE t.deployment = d.number AND t.deployment <> 0 AND NOT t.terminal),
       (SELECT count(*) FROM berth.instances i
         WHERE i.deployment = d.number AND i.deployment <> 0 AND i.ended_at IS NULL
           AND i.attempt < i.max_attempts AND i.state = 2),
       (SELECT count(*) FROM berth.tasks t
         WHERE t.deployment = d.number AND t.deployment <> 0 AND t.terminal),
       (SELECT count(*) FROM berth.outbox o
         WHERE o.deployment = d.number AND o.deployment <> 0 AND o.poisoned),
       (SELECT count(*) FROM berth.instances i
         WHERE i.deployment = d.number AND i.deployment <> 0 AND i.ended_at IS NULL
           AND i.attempt < i.max_attempts)
  FROM berth.deployments d
 WHERE $1::int4[] IS NULL OR d.number = ANY($1::int4[])
 ORDER BY d.number;

-- ---- the outbox relay (007_push.sql; pg/pgrelay.h) ----

-- name: outbox_ack
-- Push answers (round one): each counted once under (delivery, flight) in
-- the inbox; the deliveries they answer, locked, if they still carry that
-- flight (else the answer is to a send that has ended: ignored).
--   $1 uuid[] delivery ids, $2 int8[] flights.
-- Result, one row per delivery answered: id uuid, flight int8, topic
-- text, deployment int4, attempts int4, instance_id uuid (NULL),
-- call_attempt int4 (NULL).
WITH a AS (
  INSERT INTO berth.inbox (id, flight, at)
  SELECT u.id, u.flight, berth.now_ms() FROM unnest($1::uuid[], $2::int8[]) AS u(id, flight)
  ON CONFLICT DO NOTHING
  RETURNING id, flight)
SELECT o.id, o.flight, o.topic, o.deployment, o.attempts, o.instance_id, o.call_attempt
  FROM berth.outbox o
 WHERE o.id = ANY (ARRAY(SELECT id FROM a))
   AND (o.id, o.flight) IN (SELECT id, flight FROM a) AND NOT o.poisoned
 ORDER BY o.id FOR UPDATE OF o;

-- name: outbox_expired
-- Sends whose answer's deadline passed (round one of a relay turn): the
-- earliest first, at most $1, locked; rows another turn holds are skipped
-- (whichever replica comes first, never two). Each is a failed attempt.
-- Result: as outbox_ack's.
SELECT id, flight, topic, deployment, attempts, instance_id, call_attempt
  FROM berth.outbox
 WHERE NOT poisoned AND flight IS NOT NULL AND due_at <= berth.now_ms()
 ORDER BY due_at LIMIT $1::int4 FOR UPDATE SKIP LOCKED;

-- name: outbox_write
-- What the turn decided for the deliveries it locked (round two): $1
-- uuid[] ids, $2 int4[] what (0 ended: deleted; 1 backed off; 2
-- poisoned), $3 int8[] due_at, $4 int4[] attempts, $5 text[] err_code,
-- $6 text[] err_message. A call whose request it poisons has its timer
-- set to now: the next housekeeping turn (any replica's) fails that
-- attempt (timers_due's poisoned_why).
-- No rows (a command).
WITH u AS (SELECT * FROM unnest($1::uuid[], $2::int4[], $3::int8[], $4::int4[], $5::text[],
                                $6::text[]) AS u(id, what, due, attempts, ec, em)),
     d AS (DELETE FROM berth.outbox o WHERE o.id = ANY (ARRAY(SELECT id FROM u WHERE what = 0))
           RETURNING 1),
     p AS (UPDATE berth.outbox o
              SET flight = NULL, due_at = u.due, attempts = u.attempts, poisoned = (u.what = 2),
                  err_code = u.ec, err_message = u.em
             FROM u WHERE o.id = u.id AND u.what <> 0
           RETURNING o.id, o.instance_id, o.poisoned)
UPDATE berth.instances i SET timer_at = berth.now_ms()  -- told by the next housekeeping
  FROM p WHERE p.poisoned AND i.id = p.instance_id AND i.current = p.id AND i.state = 1
   AND i.ended_at IS NULL;

-- name: outbox_claim
-- The relay's claim (last in a turn): per channel lane (topic,
-- deployment) up to its room of the due rows not in flight, in seq order,
-- FOR UPDATE SKIP LOCKED (whichever replica comes first, never two); each
-- gets a new flight and, as due_at, its answer's deadline (now + $4 ms).
-- They are sent once the turn has committed. A channel whose deployment
-- the database holds retired is passed over, whatever the replica's copy
-- said (none of its rows can be due: the gate retired it holding none).
--   $1 text[] topics, $2 int4[] deployments, $3 int4[] rooms, $4 int8 ms.
-- Result, one row per send: id uuid, flight int8, topic text, deployment
-- int4, attempts int4, instance_id uuid (NULL), call_attempt int4 (NULL),
-- seq int8, created_at int8, content_type text (NULL), headers text[],
-- payload bytea.
WITH c AS (
  SELECT x.id FROM unnest($1::text[], $2::int4[], $3::int4[]) AS l(topic, dep, room)
   JOIN berth.deployments d ON d.number = l.dep AND d.state <> 3,
   LATERAL (SELECT o.id FROM berth.outbox o
             WHERE o.topic = l.topic AND o.deployment = l.dep AND NOT o.poisoned
               AND o.flight IS NULL AND o.due_at <= berth.now_ms()
             ORDER BY o.seq LIMIT l.room FOR UPDATE SKIP LOCKED) x)
UPDATE berth.outbox o SET flight = nextval('berth.flights'), due_at = berth.now_ms() + $4::int8
 WHERE o.id = ANY (ARRAY(SELECT id FROM c))
RETURNING o.id, o.flight, o.topic, o.deployment, o.attempts, o.instance_id, o.call_attempt,
          o.seq, o.created_at, o.content_type, o.headers, o.payload;

-- name: outbox_next
-- After the claim: in how many ms the next delivery comes due that is not
-- due now (a backoff's end, a send's deadline; NULL: none).
-- Result: one row, next_in int8.
SELECT (SELECT min(due_at) FROM berth.outbox WHERE NOT poisoned AND due_at > berth.now_ms())
         - berth.now_ms() AS next_in;

-- name: outbox_rearm
-- retry_delivery (round one): a poisoned delivery sent again from its
-- first attempt, due now. $1 uuid id.
-- Its deployment, if RETIRED, drains again (as tasks_retry's).
-- Result: one row if there is such a delivery: poisoned bool (false: it
-- was not poisoned, and nothing changed), topic text, redrained int8 (as
-- tasks_retry's).
WITH o AS (SELECT id, poisoned, topic, deployment FROM berth.outbox WHERE id = $1::uuid
             FOR UPDATE),
     r AS (UPDATE berth.outbox x SET poisoned = false, attempts = 0, flight = NULL,
                                     due_at = berth.now_ms(), err_code = NULL, err_message = NULL
             FROM o WHERE x.id = o.id AND o.poisoned RETURNING x.deployment),
     d AS (UPDATE berth.deployments d SET state = 2, retired_at = NULL
            WHERE d.number = (SELECT deployment FROM r) AND d.state = 3
           RETURNING d.number)
SELECT o.poisoned, o.topic, (SELECT berth.deploy_epoch_bump() FROM d) AS redrained FROM o;

-- statements.sql: the statements berth prepares on its engine connection,
-- one per `-- name: NAME` marker (pg/pgstmt.c parses them at start; a name
-- given twice is refused there). Embedded at build by pg/embed.cmake.
--
-- Parameters and results are binary (pg/pgwire.c): every parameter carries
-- its type as a cast, since the statements are prepared without parameter
-- types. Times are bigint Unix ms, ids uuid. Later increments add the
-- operations' statements here (pg/README.md §3).

-- name: turn_begin
-- The turn's clock and deployment epoch (§3.0); $1: the manual clock or NULL.
SELECT now_ms, deploy_epoch FROM berth.turn_begin($1::bigint);

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

-- 005_operator.sql: what the operator's requests read (pg/README.md
-- "Built"): list_tasks pages go by the tasks' sequence, as the embedded
-- store lists them (submission order, a page's token names a sequence), so
-- tasks_seq orders them; berth.task_state() is a task's state at an
-- instant as the embedded engine tells it, shared by get_task and
-- list_tasks. On a large table the index takes a while to build, and
-- writes to tasks wait meanwhile (the migration runs once, under its lock).
CREATE INDEX tasks_seq ON berth.tasks (seq);

-- 4 terminal, 2 locked, 5 delayed (never claimed, not fetchable yet), 3
-- backoff, 1 ready (engine_task_state). Inlined into the statements.
CREATE FUNCTION berth.task_state(terminal boolean, lock_expires_at bigint, available_at bigint,
                                 claims integer, now_ms bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN terminal THEN 4
              WHEN lock_expires_at > now_ms THEN 2
              WHEN available_at > now_ms AND claims = 0 THEN 5
              WHEN available_at > now_ms THEN 3
              ELSE 1 END $$;

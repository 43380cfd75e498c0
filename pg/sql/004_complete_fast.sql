-- 004_complete_fast.sql: berth.guard_undecided(), what the one-round
-- completion (statements.sql, complete_fast) calls when a completion
-- needs the rules' second look in C: a call's task, or a lock the delete
-- found changed since the statement's snapshot. It fails the statement
-- with SQLSTATE BR001, so the turn keeps nothing and berthd runs it again
-- the two-round way (guard_read, the rules, then the writes).
CREATE FUNCTION berth.guard_undecided() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'a completion needs the two-round turn' USING ERRCODE = 'BR001';
END $$;

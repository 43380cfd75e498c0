-- 002_turn.sql: berth.turn_begin(), the second statement of every turn
-- (pg/README.md §3.0), after BEGIN and before the turn's own statements.
--
-- clock_ms: the manual clock (tests, h_advance()) or NULL. When set, every
-- berth.now_ms() of the transaction returns it (set_config(..., true) is
-- local to the transaction, so the next turn starts clean); NULL leaves
-- now_ms() on the transaction's timestamp. Returns the turn's now_ms and
-- meta 'deploy_epoch' (0 while no deployment changed), read by the replica
-- after the turn's first round trip.
CREATE FUNCTION berth.turn_begin(clock_ms bigint, OUT now_ms bigint, OUT deploy_epoch bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF clock_ms IS NOT NULL THEN
    PERFORM set_config('berth.clock_ms', clock_ms::text, true);
  END IF;
  now_ms := berth.now_ms();
  deploy_epoch := coalesce((SELECT value::bigint FROM berth.meta WHERE key = 'deploy_epoch'), 0);
END $$;

-- 006_deploy.sql: deployments and the retirement gate (R14, R15) on
-- PostgreSQL (pg/README.md §3.9, as built: pg/pgdeploy.c).
--
-- A deployment's declaration is immutable: `decl` holds it as berthd's
-- store record (store.proto's Deployment, encoded by berthd; its state and
-- times are the columns'), `names` its channels' names, for the routes and
-- the counts. Every change of the table bumps meta 'deploy_epoch' in the
-- same transaction, under the exclusive advisory lock K_DEPLOY
-- (7089066377542189057, 'berthDep' in ASCII, as one bigint).
--
-- A turn that puts new work into a deployment (a submit or a call routed
-- to it, an operator's retry of its task) holds the same lock SHARED until
-- it commits, taken before it reads the epoch: a retire, a deploy or the
-- gate waits for such turns, so the gate's probes see their work, and a
-- turn that routed with an older epoch than the database's fails (SQLSTATE
-- BR002) before it keeps anything: the replica reads the deployments again
-- and plans it anew. Shared advisory locks live in the lock table only (no
-- tuple writes, unlike FOR SHARE on a hot row).

DROP VIEW berth.routes;
ALTER TABLE berth.deployments DROP COLUMN channels,
  ADD COLUMN names text[] NOT NULL DEFAULT '{}',
  ADD COLUMN decl bytea NOT NULL DEFAULT '';
-- name -> the deployments that declare it and are not retired (state 1
-- LIVE, at most one per name; 2 DRAINING).
CREATE VIEW berth.routes AS SELECT n AS name, d.number, d.state
  FROM berth.deployments d, unnest(d.names) n WHERE d.state IN (1, 2);

-- The counts a listing shows per deployment (the gate's probes use
-- tasks_dep, outbox_dep and instances_dep).
CREATE INDEX tasks_dep_terminal ON berth.tasks (deployment) WHERE terminal AND deployment <> 0;
CREATE INDEX outbox_dep_poisoned ON berth.outbox (deployment) WHERE poisoned AND deployment <> 0;
CREATE INDEX instances_dep_all ON berth.instances (deployment) WHERE deployment <> 0;

CREATE FUNCTION berth.deploy_epoch() RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT value::bigint FROM berth.meta WHERE key = 'deploy_epoch'), 0) $$;

CREATE FUNCTION berth.deploy_epoch_bump() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  INSERT INTO berth.meta AS m (key, value) VALUES ('deploy_epoch', '1')
  ON CONFLICT (key) DO UPDATE SET value = (m.value::bigint + 1)::text
  RETURNING value::bigint $$;

-- A routed turn's check, from its turn_begin: with share, K_DEPLOY shared
-- first; then the epoch, read after the lock (a new snapshot: this is
-- plpgsql, VOLATILE), must be the one the turn was planned with.
CREATE FUNCTION berth.deploy_epoch_check(expect bigint, share boolean) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE e bigint;
BEGIN
  IF share THEN
    PERFORM pg_advisory_xact_lock_shared(7089066377542189057);
  END IF;
  e := berth.deploy_epoch();
  IF expect IS NOT NULL AND e <> expect THEN
    RAISE EXCEPTION 'the deployments changed since this replica read them (epoch % for %)',
      e, expect USING ERRCODE = 'BR002';
  END IF;
  RETURN e;
END $$;

-- A deploy's or retire's turn: K_DEPLOY exclusive, then the epoch checked
-- as above (the turn's other work was routed with it), then every
-- deployment, in number order; for a retired one, whether anything still
-- names it (a task or delivery in any state, a call live or ended): one
-- that nothing names may be forgotten (pgdeploy.c, at the cap).
CREATE FUNCTION berth.deploy_lock(expect bigint)
RETURNS TABLE (number integer, id text, version integer, state integer, created_at bigint,
               retired_at bigint, decl bytea, named boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  PERFORM pg_advisory_xact_lock(7089066377542189057);
  PERFORM berth.deploy_epoch_check(expect, false);
  RETURN QUERY
  SELECT d.number, d.id, d.version, d.state::int4, d.created_at, d.retired_at, d.decl,
         CASE WHEN d.state = 3 THEN
           EXISTS (SELECT 1 FROM berth.tasks t WHERE t.deployment = d.number AND t.deployment <> 0
                     AND NOT t.terminal)
           OR EXISTS (SELECT 1 FROM berth.tasks t WHERE t.deployment = d.number
                        AND t.deployment <> 0 AND t.terminal)
           OR EXISTS (SELECT 1 FROM berth.outbox o WHERE o.deployment = d.number
                        AND o.deployment <> 0 AND NOT o.poisoned)
           OR EXISTS (SELECT 1 FROM berth.outbox o WHERE o.deployment = d.number
                        AND o.deployment <> 0 AND o.poisoned)
           OR EXISTS (SELECT 1 FROM berth.instances i WHERE i.deployment = d.number
                        AND i.deployment <> 0)
         ELSE true END
    FROM berth.deployments d ORDER BY d.number;
END $$;

-- Whether a deployment holds nothing pending (R14): no delivery that is
-- not poisoned, no task that is not terminal, no call with an attempt left
-- (between two attempts, or waiting on one that is not its last: it may
-- still re-drive into it). Index probes (tasks_dep, outbox_dep,
-- instances_dep); plain SQL, inlined where it is used.
CREATE FUNCTION berth.deploy_holds_nothing(n integer) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (SELECT 1 FROM berth.tasks t
                      WHERE t.deployment = n AND NOT t.terminal AND t.deployment <> 0)
     AND NOT EXISTS (SELECT 1 FROM berth.outbox o
                      WHERE o.deployment = n AND NOT o.poisoned AND o.deployment <> 0)
     AND NOT EXISTS (SELECT 1 FROM berth.instances i
                      WHERE i.deployment = n AND i.ended_at IS NULL
                        AND i.attempt < i.max_attempts AND i.deployment <> 0) $$;

-- The retirement gate (R14): every DRAINING deployment that holds nothing
-- is RETIRED now. It looks first without the lock (this transaction's own
-- work counts; others' uncommitted does not), and takes K_DEPLOY only for
-- a deployment that looks empty, then looks again under it. wait: take
-- the lock however long it takes (a turn that holds nothing else);
-- otherwise only if it is free now or this transaction holds it (a turn's
-- last statement: a turn that holds rows must not wait on turns that may
-- wait on them). Returns the deployments retired; the epoch is bumped when
-- there are any.
CREATE FUNCTION berth.deploy_gate(wait boolean)
RETURNS TABLE (number integer, id text, version integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  IF NOT EXISTS (SELECT 1 FROM berth.deployments d
                  WHERE d.state = 2 AND berth.deploy_holds_nothing(d.number)) THEN
    RETURN;
  END IF;
  IF wait THEN
    PERFORM pg_advisory_xact_lock(7089066377542189057);
  ELSIF NOT pg_try_advisory_xact_lock(7089066377542189057) THEN
    RETURN;
  END IF;
  RETURN QUERY WITH r AS (
  UPDATE berth.deployments d SET state = 3, retired_at = berth.now_ms()
   WHERE d.state = 2 AND berth.deploy_holds_nothing(d.number)
  RETURNING d.number, d.id, d.version) SELECT * FROM r;
  IF FOUND THEN
    PERFORM berth.deploy_epoch_bump();
  END IF;
END $$;

-- berth.submit() (003_submit.sql) again, routing as berthd routes: a topic
-- a LIVE deployment declares goes to it (K_DEPLOY shared until the
-- caller's COMMIT: a retire and the gate wait for the caller's
-- transaction); a topic only DRAINING deployments declare takes nothing
-- new (SQLSTATE 55000, berthd's FAILED_PRECONDITION and words), nor,
-- under strict channels, one no deployment declares (SQLSTATE 42704,
-- berthd's NOT_FOUND); a key accepted within the horizon is a duplicate
-- all the same (R17 outlives the route). The rest is 003's, unchanged.
CREATE OR REPLACE FUNCTION berth.submit(topic text, payload bytea,
                             headers text[] DEFAULT '{}',
                             content_type text DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             delay_ms bigint DEFAULT NULL,
                             priority bigint DEFAULT NULL,
                             OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  s jsonb := (SELECT m.value::jsonb FROM berth.meta m WHERE m.key = 'settings');
  now_ms bigint := berth.now_ms();
  new_id uuid := gen_random_uuid();
  pay bytea := coalesce(submit.payload, ''::bytea);
  hs text[] := coalesce(submit.headers, '{}');
  prio bigint;
  bytes bigint;
  won uuid;
  i int;
  live integer;
  draining boolean;
BEGIN
  IF s IS NULL THEN
    RAISE EXCEPTION 'berth.submit: no berthd has booted on this database yet, so its settings '
                    '(bounds, failure budget) are unknown'
      USING ERRCODE = '55000';
  END IF;
  IF submit.topic IS NULL OR submit.topic = '' THEN
    RAISE EXCEPTION 'topic: a topic is required' USING ERRCODE = '22023', DETAIL = 'field=topic';
  END IF;
  IF octet_length(submit.topic) > 200 THEN
    RAISE EXCEPTION 'topic: % bytes is over the ceiling 200', octet_length(submit.topic)
      USING ERRCODE = '22023', DETAIL = 'field=topic limit=200';
  END IF;
  IF submit.topic !~ '^[A-Za-z0-9_.:/-]+$' THEN
    RAISE EXCEPTION 'topic: "%" may hold only letters, digits and _ - . : /', left(submit.topic, 64)
      USING ERRCODE = '22023', DETAIL = 'field=topic';
  END IF;
  IF octet_length(pay) > (s->>'payload_max_bytes')::bigint THEN
    RAISE EXCEPTION 'payload: % is over the ceiling %', octet_length(pay), s->>'payload_max_bytes'
      USING ERRCODE = '22023', DETAIL = 'field=payload limit=' || (s->>'payload_max_bytes');
  END IF;
  IF submit.delay_ms IS NOT NULL AND submit.delay_ms < 0 THEN
    RAISE EXCEPTION 'delay_ms: % is below 0', submit.delay_ms
      USING ERRCODE = '22023', DETAIL = 'field=delay_ms';
  END IF;
  IF submit.delay_ms > (s->>'delay_max_ms')::bigint THEN
    RAISE EXCEPTION 'delay_ms: % is over the ceiling %', submit.delay_ms, s->>'delay_max_ms'
      USING ERRCODE = '22023', DETAIL = 'field=delay_ms limit=' || (s->>'delay_max_ms');
  END IF;
  prio := coalesce(submit.priority, (s->>'priority_default')::bigint);
  IF prio < 0 THEN
    RAISE EXCEPTION 'priority: % is below 0', prio USING ERRCODE = '22023', DETAIL = 'field=priority';
  END IF;
  IF prio > (s->>'priority_max')::bigint THEN
    RAISE EXCEPTION 'priority: % is over the ceiling %', prio, s->>'priority_max'
      USING ERRCODE = '22023', DETAIL = 'field=priority limit=' || (s->>'priority_max');
  END IF;
  IF coalesce(array_length(hs, 1), 0) % 2 <> 0 OR array_ndims(hs) > 1 THEN
    RAISE EXCEPTION 'headers: name, value, name, value...: an even number of elements'
      USING ERRCODE = '22023', DETAIL = 'field=headers';
  END IF;
  IF coalesce(array_length(hs, 1), 0) / 2 > 64 THEN
    RAISE EXCEPTION 'headers: % is over the ceiling 64', array_length(hs, 1) / 2
      USING ERRCODE = '22023', DETAIL = 'field=headers limit=64';
  END IF;
  bytes := 16 + octet_length(pay) + octet_length(submit.topic)
           + coalesce(octet_length(submit.content_type), 0);
  FOR i IN 1 .. coalesce(array_length(hs, 1), 0) / 2 LOOP
    IF hs[2 * i - 1] IS NULL OR hs[2 * i - 1] = '' THEN
      RAISE EXCEPTION 'headers: a name is required' USING ERRCODE = '22023', DETAIL = 'field=headers';
    END IF;
    IF octet_length(hs[2 * i - 1]) > 128 THEN
      RAISE EXCEPTION 'headers: % bytes is over the ceiling 128', octet_length(hs[2 * i - 1])
        USING ERRCODE = '22023', DETAIL = 'field=headers limit=128';
    END IF;
    IF octet_length(hs[2 * i]) > 4096 THEN
      RAISE EXCEPTION 'headers: % bytes is over the ceiling 4096', octet_length(hs[2 * i])
        USING ERRCODE = '22023', DETAIL = 'field=headers limit=4096';
    END IF;
    IF lower(hs[2 * i - 1]) LIKE 'berth-%' THEN
      RAISE EXCEPTION 'headers: "%" is reserved: names beginning "berth-" are set by berth alone',
                      left(hs[2 * i - 1], 64)
        USING ERRCODE = '22023', DETAIL = 'field=headers';
    END IF;
    hs[2 * i] := coalesce(hs[2 * i], '');
    bytes := bytes + 2 + octet_length(hs[2 * i - 1]) + octet_length(hs[2 * i]);
  END LOOP;
  IF octet_length(submit.content_type) > 256 THEN
    RAISE EXCEPTION 'content_type: % bytes is over the ceiling 256', octet_length(submit.content_type)
      USING ERRCODE = '22023', DETAIL = 'field=content_type limit=256';
  END IF;
  IF octet_length(submit.idempotency_key) > 256 THEN
    RAISE EXCEPTION 'idempotency_key: % bytes is over the ceiling 256',
                    octet_length(submit.idempotency_key)
      USING ERRCODE = '22023', DETAIL = 'field=idempotency_key limit=256';
  END IF;

  -- The route, as berthd routes (006_deploy.sql).
  IF EXISTS (SELECT 1 FROM berth.routes x WHERE x.name = submit.topic) THEN
    PERFORM pg_advisory_xact_lock_shared(7089066377542189057);
  END IF;
  SELECT max(x.number) FILTER (WHERE x.state = 1), coalesce(bool_or(x.state = 2), false)
    INTO live, draining FROM berth.routes x WHERE x.name = submit.topic;
  IF live IS NULL AND (draining OR coalesce((s->>'strict_channels')::boolean, false)) THEN
    IF submit.idempotency_key IS NOT NULL AND submit.idempotency_key <> '' THEN
      SELECT k.id INTO won FROM berth.submit_keys k
       WHERE k.kind = 's' AND k.topic = submit.topic AND k.key = submit.idempotency_key
         AND k.at > now_ms - (s->>'dedup_horizon_ms')::bigint;
      IF FOUND THEN
        id := won;
        duplicate := true;
        RETURN;
      END IF;
    END IF;
    IF draining THEN
      RAISE EXCEPTION 'channel % is declared only by draining deployments: it takes no new work',
                      submit.topic USING ERRCODE = '55000', DETAIL = 'field=topic';
    END IF;
    RAISE EXCEPTION 'topic % is not a declared channel', submit.topic
      USING ERRCODE = '42704', DETAIL = 'field=topic';
  END IF;

  -- The key, as the submit statement keeps it (R17): taken over only past
  -- the horizon; a second transaction with the same key waits for the
  -- first to end, then reads its id.
  IF submit.idempotency_key IS NOT NULL AND submit.idempotency_key <> '' THEN
    INSERT INTO berth.submit_keys AS k (kind, topic, key, id, at)
    VALUES ('s', submit.topic, submit.idempotency_key, new_id, now_ms)
    ON CONFLICT (kind, topic, key) DO UPDATE
      SET id = CASE WHEN k.at <= now_ms - (s->>'dedup_horizon_ms')::bigint
                    THEN excluded.id ELSE k.id END,
          at = CASE WHEN k.at <= now_ms - (s->>'dedup_horizon_ms')::bigint
                    THEN excluded.at ELSE k.at END
    RETURNING k.id INTO won;
    IF won <> new_id THEN
      id := won;
      duplicate := true;
      RETURN;
    END IF;
  END IF;

  INSERT INTO berth.tasks (id, topic, deployment, priority, created_at, available_at,
                           retries_left, content_type, headers, body_bytes, payload)
  VALUES (new_id, submit.topic, coalesce(live, 0), prio, now_ms,
          now_ms + coalesce(submit.delay_ms, 0),
          (s->>'retries')::int, nullif(submit.content_type, ''), hs, bytes, pay);
  -- Rung at commit, and only then; NOTIFY folds repeats within one
  -- transaction.
  IF coalesce(submit.delay_ms, 0) > 0 THEN
    PERFORM pg_notify('berth', 't:' || submit.topic || '+' || submit.delay_ms);
  ELSE
    PERFORM pg_notify('berth', 'p:' || submit.topic);
  END IF;
  id := new_id;
  duplicate := false;
END $$;

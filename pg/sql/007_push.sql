-- 007_push.sql: push channels on PostgreSQL (pg/README.md §3.8, as built:
-- pg/pgrelay.c). A submit or call routed to a push channel writes an
-- outbox row, not a task; every replica's relay claims the due rows of
-- each channel (FOR UPDATE SKIP LOCKED), marks them in flight with a
-- flight number and a deadline in the claim's own transaction, and sends
-- them once it has committed. The receiver's answer is a second
-- transaction, counted once under (delivery, flight) in berth.inbox.

-- The push channels a deployment declares (its declaration, `decl`, is
-- berthd's encoding: this is what SQL needs of it).
ALTER TABLE berth.deployments ADD COLUMN push_names text[] NOT NULL DEFAULT '{}';

-- Flight numbers: unique across replicas.
CREATE SEQUENCE berth.flights;

-- A channel's rows waiting for a send, in order (the relay's claim), and
-- the sends in flight by their deadline (a deadline that passes is a
-- failed attempt).
CREATE INDEX outbox_lane ON berth.outbox (topic, deployment, seq)
  WHERE NOT poisoned AND flight IS NULL;
CREATE INDEX outbox_flights ON berth.outbox (due_at) WHERE NOT poisoned AND flight IS NOT NULL;

-- Answers counted: they leave with the dedup horizon (housekeeping).
CREATE INDEX inbox_at ON berth.inbox (at);

-- berth.submit() (006_deploy.sql) again: a topic its live deployment
-- declares a push channel gets its delivery (an outbox row, due when the
-- task would be fetchable, rung "o:" for the relays) instead of a task.
-- The rest is 006's, unchanged (a migration never edits an earlier one).
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

  IF live IS NOT NULL AND EXISTS (SELECT 1 FROM berth.deployments d
                                   WHERE d.number = live AND submit.topic = ANY (d.push_names)) THEN
    -- A push channel: its delivery, claimed by a replica's relay.
    INSERT INTO berth.outbox (id, topic, deployment, priority, created_at, due_at, content_type,
                              headers, body_bytes, payload)
    VALUES (new_id, submit.topic, live, prio, now_ms, now_ms + coalesce(submit.delay_ms, 0),
            nullif(submit.content_type, ''), hs, bytes, pay);
    PERFORM pg_notify('berth', 'o:');
  ELSE
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
  END IF;
  id := new_id;
  duplicate := false;
END $$;

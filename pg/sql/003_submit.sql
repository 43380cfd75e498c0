-- 003_submit.sql: berth.submit(), a task submitted inside the caller's own
-- transaction (pg/README.md §3.10): it exists if and only if that
-- transaction commits, and its doorbell rings only then (NOTIFY is sent at
-- commit). An application writes its order and its task in one
-- transaction, with no outbox of its own:
--
--   BEGIN;
--   INSERT INTO orders ...;
--   SELECT * FROM berth.submit('orders', '\x7b7d'::bytea, idempotency_key => 'order-17');
--   COMMIT;
--
-- It returns (id uuid, duplicate boolean): duplicate when the key named an
-- earlier submit within the dedup horizon (id is then that task's). The
-- bounds are berthd's, as the last berthd to boot wrote them in
-- berth.meta 'settings' (each berthd writes its own at boot: give every
-- replica the same settings); a request over them is refused with SQLSTATE
-- 22023 (invalid_parameter_value), the message berthd would answer and
-- DETAIL 'field=NAME' (and ' limit=N' for a ceiling). Not served here:
-- declared channels (the topic is a plain pull topic). Events are not
-- published for these submits: no replica made them.
CREATE FUNCTION berth.submit(topic text, payload bytea,
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

  INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, retries_left,
                           content_type, headers, body_bytes, payload)
  VALUES (new_id, submit.topic, prio, now_ms, now_ms + coalesce(submit.delay_ms, 0),
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

-- 001_schema.sql: berth's tables in schema `berth` (pg/README.md §2) and
-- berth.now_ms() (§3.0).
--
-- Applied by pgschema_migrate() (pg/pgschema.c) in one transaction under the
-- migration advisory lock; pgschema.c then writes meta 'schema_version' and
-- the berth.migrations row in the same transaction. A migration never edits
-- an earlier one: a change is a new NNN_*.sql file.
--
-- Units: times are bigint Unix ms, ids and tokens uuid (berth's raw 16-byte
-- id), priority bigint (uint32 on the wire). Checked on PostgreSQL 15
-- (Debian's build has lz4: SET COMPRESSION lz4 works).

-- IF NOT EXISTS: an operator may create the schema beforehand (to own it,
-- grant on it); everything inside it is ours.
CREATE SCHEMA IF NOT EXISTS berth;

CREATE TABLE berth.meta (key text PRIMARY KEY, value text NOT NULL);
-- 'schema_version' (the last migration applied; pgschema.c writes it),
-- 'settings' (json: retries, priority_default/max, payload_max_bytes,
-- delay_max_ms, dedup_horizon_ms, strict_channels, lock_default_ms ...: what
-- berth.submit() and every replica must agree on), 'deploy_epoch'.

-- One row per migration applied: its history (meta holds the version).
CREATE TABLE berth.migrations (
  version     integer PRIMARY KEY,
  name        text    NOT NULL,                -- the file, e.g. '001_schema'
  applied_at  bigint  NOT NULL,                -- Unix ms, the server's clock
  applied_by  text    NOT NULL                 -- application_name and backend pid
);

CREATE SEQUENCE berth.seq;  -- deliveries and tasks share it (a task keeps its delivery's seq)

-- Pull work: one row per task, live or terminal.
CREATE TABLE berth.tasks (
  id            uuid    PRIMARY KEY,
  seq           bigint  NOT NULL DEFAULT nextval('berth.seq'),
  topic         text    NOT NULL,
  deployment    integer NOT NULL DEFAULT 0,      -- Body.deployment; 0 implicit
  priority      bigint  NOT NULL,
  created_at    bigint  NOT NULL,
  available_at  bigint  NOT NULL,                -- delay's end, then a backoff's
  lock_expires_at bigint,                        -- NULL: never claimed
  fetchable_at  bigint  GENERATED ALWAYS AS
                 (greatest(available_at, coalesce(lock_expires_at, 0))) STORED,
  terminal      boolean NOT NULL DEFAULT false,
  worker_id     text, lock_token uuid,
  claims        integer NOT NULL DEFAULT 0,
  failures      integer NOT NULL DEFAULT 0,
  retries_left  integer NOT NULL,
  err_code text, err_message text, err_details text,
  instance_id   uuid, call_attempt integer,      -- a call's task
  content_type  text,
  headers       text[]  NOT NULL DEFAULT '{}',   -- name,value,name,value
  body_bytes    integer NOT NULL,                -- fetch byte budgets without detoasting
  payload       bytea   NOT NULL
) WITH (fillfactor = 85,
        autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05,
        vacuum_truncate = false);
ALTER TABLE berth.tasks ALTER payload SET COMPRESSION lz4;

CREATE INDEX tasks_claim ON berth.tasks (topic, priority, fetchable_at, seq) WHERE NOT terminal;
CREATE INDEX tasks_due   ON berth.tasks (topic, fetchable_at) WHERE NOT terminal;  -- §5; provisional
CREATE INDEX tasks_dep   ON berth.tasks (deployment) WHERE NOT terminal AND deployment <> 0; -- R14 gate
CREATE INDEX tasks_terminal ON berth.tasks (topic, seq) WHERE terminal;              -- admin

-- Push deliveries only (a pull submit writes the task row). The tasks
-- columns that apply, and the sender's state (store.proto DeliveryState).
CREATE TABLE berth.outbox (
  id            uuid    PRIMARY KEY,             -- the delivery's id (its task's, once pulled)
  seq           bigint  NOT NULL DEFAULT nextval('berth.seq'),
  topic         text    NOT NULL,                -- the push channel
  deployment    integer NOT NULL DEFAULT 0,
  priority      bigint  NOT NULL,
  created_at    bigint  NOT NULL,
  due_at        bigint  NOT NULL,                -- next send: not_before, a retry's backoff, a flight's timeout
  attempts      integer NOT NULL DEFAULT 0,      -- failed sends so far
  poisoned      boolean NOT NULL DEFAULT false,  -- out of attempts: kept for the operator
  flight        bigint,                          -- the send in flight; its ack names it (inbox)
  err_code text, err_message text, err_details text,  -- the last send's failure
  instance_id   uuid, call_attempt integer,      -- a call's delivery
  content_type  text,
  headers       text[]  NOT NULL DEFAULT '{}',   -- name,value,name,value
  body_bytes    integer NOT NULL,
  payload       bytea   NOT NULL
) WITH (fillfactor = 85,
        autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05,
        vacuum_truncate = false);
ALTER TABLE berth.outbox ALTER payload SET COMPRESSION lz4;
CREATE INDEX outbox_due ON berth.outbox (due_at) WHERE NOT poisoned;
CREATE INDEX outbox_dep ON berth.outbox (deployment) WHERE NOT poisoned AND deployment <> 0;

-- Calls: one row per call, live and ended (the 'L' and 'E' records;
-- store.proto Instance).
CREATE TABLE berth.instances (
  id            uuid     PRIMARY KEY,
  topic         text     NOT NULL,
  deployment    integer  NOT NULL DEFAULT 0,
  state         smallint NOT NULL,               -- 1 WAITING, 2 BACKOFF, 3 RESOLVED, 4 FAILED
  attempt       integer  NOT NULL DEFAULT 1,     -- the attempt in flight (1 first)
  max_attempts  integer  NOT NULL DEFAULT 1,
  -- the policy (NULL timeout_ms: none)
  timeout_ms         bigint,
  initial_backoff_ms bigint,
  max_backoff_ms     bigint,
  multiplier         double precision,
  non_retryable      text[]   NOT NULL DEFAULT '{}',
  -- the request, kept only if max_attempts > 1 (a re-drive sends it again)
  request_payload      bytea,
  request_headers      text[],
  request_content_type text,
  request_priority     bigint,
  current       uuid,                            -- the attempt's delivery (and task) id
  timer_at      bigint,                          -- NULL: none
  created_at    bigint   NOT NULL,
  ended_at      bigint,                          -- NULL: live
  key_topic     text, key text,                  -- its submit_keys row ('c'), if any
  -- the outcome: a result, or an error
  result_payload      bytea,
  result_content_type text,
  result_headers      text[],
  err_code text, err_message text, err_details text
);
ALTER TABLE berth.instances ALTER request_payload SET COMPRESSION lz4;
ALTER TABLE berth.instances ALTER result_payload SET COMPRESSION lz4;
CREATE INDEX instances_timer ON berth.instances (timer_at) WHERE timer_at IS NOT NULL;
CREATE INDEX instances_ended ON berth.instances (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX instances_dep ON berth.instances (deployment)   -- R14: a call with an attempt left
  WHERE ended_at IS NULL AND attempt < max_attempts AND deployment <> 0;

CREATE TABLE berth.submit_keys (kind "char" NOT NULL,  -- 's' submit, 'c' call
  topic text NOT NULL, key text NOT NULL, id uuid NOT NULL, at bigint NOT NULL,
  PRIMARY KEY (kind, topic, key));
CREATE INDEX submit_keys_at ON berth.submit_keys (at);  -- expiry

CREATE TABLE berth.inbox (id uuid, flight bigint, at bigint NOT NULL, PRIMARY KEY (id, flight));

CREATE TABLE berth.deployments (number integer PRIMARY KEY, id text NOT NULL, version integer,
  state smallint NOT NULL,                              -- 1 LIVE, 2 DRAINING, 3 RETIRED
  created_at bigint, retired_at bigint,
  channels jsonb NOT NULL);                             -- a version's declaration: immutable
CREATE VIEW berth.routes AS SELECT c->>'name' AS name, d.number   -- name -> live declarer
  FROM berth.deployments d, jsonb_array_elements(d.channels) c WHERE d.state = 1;

CREATE TABLE berth.incidents (at bigint, seq bigint DEFAULT nextval('berth.seq'), kind smallint,
  ref uuid, topic text, code text, message text, PRIMARY KEY (at, seq));

CREATE TABLE berth.leases (name text PRIMARY KEY, holder text, expires_at bigint); -- spare

-- The turn's clock (§3.0): berth.clock_ms if the transaction set it (tests,
-- a manual clock), else the transaction's timestamp; constant per
-- transaction. STABLE and plain SQL, so the planner inlines it.
CREATE FUNCTION berth.now_ms() RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT coalesce(nullif(current_setting('berth.clock_ms', true), '')::bigint,
                  (extract(epoch FROM transaction_timestamp()) * 1000)::bigint) $$;

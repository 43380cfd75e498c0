#!/usr/bin/env node
'use strict';
// The floor: a plain FOR UPDATE SKIP LOCKED queue on PostgreSQL (PGURI),
// driven by pgbench, in berth's load shapes. No library, no job states, no
// notifications: what PostgreSQL itself does for a durable add and a
// durable claim-and-complete.
//
//   PGURI=postgresql://... node floor.js --shape s1|s2 [--jobs N] [--json]
//        [--idle-ms MS] [--threads J] [--lock]
//
// --lock: the at-least-once floor. The workers run floor-lock.sql instead:
// a claim that writes a lock (expiry, token, count), and the delete of the
// rows whose token still matches riding with the worker's next claim, as
// any queue whose jobs survive a worker dying must (the table gets the
// three columns). Measured apart, completing in a transaction of its own
// after each claim ran no faster (S2 19,000-21,000 jobs/s, S1 1,550-1,950).
//
// It recreates bench_floor.q (id bigserial primary key, payload text), then
// starts two pgbench processes together: P clients running floor-insert.sql
// (--batch rows per transaction) for N / (P x batch) transactions each, and W
// clients running floor-claim.sql (DELETE ... WHERE id = ANY(ARRAY(SELECT id
// ... ORDER BY id FOR UPDATE SKIP LOCKED LIMIT batch)) RETURNING id, payload)
// until stopped. A claimer that finds the queue empty sleeps --idle-ms (1).
// When the inserters are done it polls the table until it is empty, takes
// that instant as the end, and stops the claimers (SIGTERM to the pgbench it
// started). jobs/s = N / (start -> queue empty). Accounting: rows inserted
// and deleted come from pg_stat_user_tables (n_tup_ins, n_tup_del) after the
// clients are gone; lost = N - deleted (and the table must be empty); a
// DELETE returns a row once, so duplicates are 0 by construction.
// PGBENCH names the pgbench binary (default: pgbench on PATH).
const { spawn } = require('node:child_process');
const path = require('node:path');
const { Client } = require('pg');
const { parseArgs, sleep, now } = require('./common');

function pgbench(args) {
  const bin = process.env.PGBENCH || 'pgbench';
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  const done = new Promise((resolve) => {
    child.on('error', (e) => resolve({ code: -1, out, err: err + String(e) }));
    child.on('exit', (code, signal) => resolve({ code, signal, out, err }));
  });
  return { child, done };
}

function field(text, re) {
  const m = re.exec(text);
  return m ? Number(m[1]) : null;
}

async function runFloor(o) {
  const uri = process.env.PGURI;
  if (!uri) throw new Error('set PGURI');
  const per = o.producers * o.batch;
  if (o.jobs % per !== 0) throw new Error(`--jobs must be a multiple of producers x batch (${per})`);
  const wallStart = Date.now();
  const pg = new Client({ connectionString: uri });
  await pg.connect();
  await pg.query('DROP SCHEMA IF EXISTS bench_floor CASCADE');
  await pg.query('CREATE SCHEMA bench_floor');
  await pg.query('CREATE TABLE bench_floor.q (id bigserial PRIMARY KEY, payload text NOT NULL' +
    (o.lock ? ', locked_until bigint NOT NULL DEFAULT 0, token text, claims integer NOT NULL DEFAULT 0' : '') +
    ')' + (o.lock ? ' WITH (fillfactor = 85)' : ''));
  const claimScript = o.lock ? 'floor-lock.sql' : 'floor-claim.sql';
  const dir = __dirname;
  const common = ['-n', '-j', String(o.threads), '-D', `batch=${o.batch}`];
  if (o.lock) common.push('-D', "pairs=(0,'')");
  const t0 = now();
  const ins = pgbench([...common, '-f', path.join(dir, 'floor-insert.sql'), '-c', String(o.producers),
    '-t', String(o.jobs / per), '-D', `payload=${o.payload}`, uri]);
  const cla = pgbench([...common, '-f', path.join(dir, claimScript), '-c', String(o.workers),
    '-T', String(o.timeout), '-D', `idle_ms=${o['idle-ms']}`, uri]);
  let error = null;
  const insDone = await Promise.race([ins.done, cla.done.then((r) => ({ claimerFirst: r }))]);
  if (insDone.claimerFirst) {
    error = `claimer pgbench ended first (${insDone.claimerFirst.code}): ${insDone.claimerFirst.err.trim()}`;
  } else if (insDone.code !== 0) {
    error = `inserter pgbench failed (${insDone.code}): ${insDone.err.trim()}`;
  }
  let t1 = now();
  const deadline = t0 + o.timeout * 1000;
  if (!error) {
    for (;;) {
      const r = await pg.query('SELECT EXISTS (SELECT 1 FROM bench_floor.q) AS any');
      t1 = now();
      if (!r.rows[0].any || t1 > deadline) break;
      await sleep(5);
    }
  }
  cla.child.kill('SIGTERM');
  const claRes = await cla.done;
  const insRes = await ins.done;
  // The claimers' backends flush their counters as they exit.
  let ins_n = 0;
  let del_n = 0;
  let left = 0;
  for (let k = 0; k < 100; k++) {
    await pg.query('SELECT pg_stat_clear_snapshot()');
    const r = await pg.query(
      `SELECT n_tup_ins, n_tup_del, (SELECT count(*) FROM bench_floor.q) AS left
         FROM pg_stat_user_tables WHERE relid = 'bench_floor.q'::regclass`);
    ins_n = Number(r.rows[0].n_tup_ins);
    del_n = Number(r.rows[0].n_tup_del);
    left = Number(r.rows[0].left);
    const backends = await pg.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'pgbench'");
    if (backends.rows[0].n === 0 && del_n + left >= ins_n) break;
    await sleep(50);
  }
  await pg.end();
  const seconds = (t1 - t0) / 1000;
  const r = {
    system: o.lock ? 'at-least-once floor (pgbench, SKIP LOCKED, claim then delete)' : 'floor (pgbench, SKIP LOCKED)',
    version: `pgbench ${(/pgbench \((\S+)/.exec(insRes.out) || [])[1] || '?'}`,
    shape: o.shape,
    jobs: o.jobs,
    producers: o.producers,
    workers: o.workers,
    batch: o.batch,
    payload: o.payload,
    seconds: +seconds.toFixed(3),
    jobs_per_s: +(Math.min(del_n, o.jobs) / seconds).toFixed(1),
    lost: Math.max(o.jobs - del_n, left, o.jobs - ins_n),
    duplicates: 0,
    store_completed: del_n,
    p50: null,
    p99: null,
    insert_tps: field(insRes.out, /tps = ([\d.]+)/),
    insert_latency_ms: field(insRes.out, /latency average = ([\d.]+) ms/),
    inserted: ins_n,
    wall_s: +((Date.now() - wallStart) / 1000).toFixed(1),
    settings: { insert: 'floor-insert.sql', claim: claimScript, idle_ms: o['idle-ms'], threads: o.threads },
  };
  if (error) r.error = error;
  else if (claRes.signal !== 'SIGTERM' && claRes.code !== 0) r.error = `claimer pgbench: ${claRes.err.trim()}`;
  if (o.json) {
    console.log(JSON.stringify(r));
  } else {
    console.log(`${r.system} ${r.shape}: ${r.jobs} jobs in ${r.seconds}s = ${r.jobs_per_s} jobs/s, lost ${r.lost}, ` +
      `inserts alone ${r.insert_tps} tx/s (${r.insert_latency_ms} ms each)` + (r.error ? `\nERROR: ${r.error}` : ''));
  }
  return r.lost || r.error ? 1 : 0;
}

let o;
try {
  o = parseArgs(process.argv.slice(2), { 'idle-ms': 1, threads: 1, lock: false });
} catch (e) {
  console.error(e.message);
  process.exit(2);
}
runFloor(o).then((rc) => process.exit(rc), (e) => { console.error(e && e.stack || e); process.exit(1); });

'use strict';
// What every competitor script shares: the options, the two load shapes,
// the ledger that proves no job was lost or done twice, and the report.
//
// A job's payload is a JSON object {i, p}: i is the job's index (0..N-1), p
// pads the serialized payload to --payload bytes (100 by default, as in
// berth-bench). Producers take the next index (or the next --batch indices)
// from one shared counter, so every index is added exactly once; workers
// mark the index they were handed. At the end:
//   lost       = indices never handed to a worker, plus jobs the store does
//                not show as completed (whichever is larger);
//   duplicates = extra hand-outs of an index already handed out.
// Latency is per job: the producer's add call issued -> the worker's handler
// called with the job (the libraries' worker loops complete a job after the
// handler returns, without telling the caller when the completion commits,
// so "handler called" is the one instant observable in every library).
// Throughput is N / (first add issued -> the store confirms all N completed).

const { performance } = require('node:perf_hooks');

// Milliseconds on a clock that the worker child process shares.
const now = () => performance.timeOrigin + performance.now();

const SHAPES = {
  s1: { producers: 8, workers: 8, batch: 1, jobs: 20000 },
  s2: { producers: 4, workers: 4, batch: 100, jobs: 200000 },
};

function usage(extra) {
  return `options: --shape s1|s2 [--jobs N] [--producers P] [--workers W] [--batch B]
         [--payload BYTES] [--timeout S] [--procs 1|2] [--json]${extra ? '\n         ' + extra : ''}
env:     PGURI (PostgreSQL systems), REDIS_PORT (Redis systems, default 6379)`;
}

// Parses argv into an options object; `more` lists extra flags a script
// accepts ({name: default}); a default of false marks a boolean flag.
function parseArgs(argv, more = {}) {
  const o = { shape: 's1', payload: 100, timeout: 900, json: false, ...more };
  const given = {};
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}\n${usage()}`);
    const name = a.slice(2);
    if (name === 'help') { console.log(usage(Object.keys(more).map((m) => '--' + m).join(' '))); process.exit(0); }
    if (name === 'json' || more[name] === false) { o[name] = true; continue; }
    if (k + 1 >= argv.length) throw new Error(`${a} needs a value`);
    given[name] = argv[++k];
  }
  if (given.shape) o.shape = given.shape;
  const shape = SHAPES[o.shape];
  if (!shape) throw new Error(`--shape must be s1 or s2, not ${o.shape}`);
  Object.assign(o, shape);
  for (const [name, v] of Object.entries(given)) {
    if (name === 'shape') continue;
    if (!(name in o)) throw new Error(`unknown option --${name}\n${usage()}`);
    o[name] = typeof o[name] === 'number' ? Number(v) : v;
    if (typeof o[name] === 'number' && !Number.isFinite(o[name])) throw new Error(`--${name} needs a number`);
  }
  if (o.payload < 16) o.payload = 16;
  return o;
}

// The payload of job i: {"i":i,"p":"xxx..."} padded to `bytes` bytes.
function makePayload(i, bytes) {
  const head = `{"i":${i},"p":"`;
  const pad = Math.max(0, bytes - head.length - 2);
  return { i, p: 'x'.repeat(pad) };
}

class Ledger {
  constructor(n) {
    this.n = n;
    this.next = 0;            // next index to add
    this.handed = new Uint16Array(n);
    this.addedAt = new Float64Array(n);
    this.firstAt = new Float64Array(n);
    this.unique = 0;          // indices handed out at least once
    this.duplicates = 0;
    this.bogus = 0;           // payloads without a valid index
    this.start = 0;
    this.allHandled = null;   // resolves when every index was handed out once
    this._resolve = null;
    this.allHandled = new Promise((r) => { this._resolve = r; });
  }
  // Takes up to k indices for a producer; returns [from, to) or null when done.
  take(k) {
    if (this.next >= this.n) return null;
    const from = this.next;
    const to = Math.min(this.n, from + k);
    this.next = to;
    return [from, to];
  }
  added(from, to, t) { for (let i = from; i < to; i++) this.addedAt[i] = t; }
  // A worker was handed the job whose payload carries index i.
  handle(i, t) {
    if (!Number.isInteger(i) || i < 0 || i >= this.n) { this.bogus++; return; }
    const c = this.handed[i];
    if (c < 65535) this.handed[i] = c + 1;
    if (c === 0) {
      this.firstAt[i] = t === undefined ? now() : t;
      if (++this.unique === this.n) this._resolve();
    } else {
      this.duplicates++;
    }
  }
  latencies() {
    const l = [];
    for (let i = 0; i < this.n; i++) if (this.handed[i]) l.push(this.firstAt[i] - this.addedAt[i]);
    l.sort((a, b) => a - b);
    return l;
  }
}

function pct(sorted, p) {
  if (!sorted.length) return null;
  const k = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[k];
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs o.producers producers: each loops taking `batch` indices and awaiting
// add(from, to, producer) until the ledger is exhausted.
async function runProducers(ledger, o, add) {
  const one = async (k) => {
    for (;;) {
      const r = ledger.take(o.batch);
      if (!r) return;
      ledger.added(r[0], r[1], now());
      await add(r[0], r[1], k);
    }
  };
  await Promise.all(Array.from({ length: o.producers }, (_, k) => one(k)));
}

// Waits until `check` (async, returns the number of jobs the store shows as
// completed) reports n, polling every `everyMs`; returns the last count.
async function waitStore(check, n, deadline, everyMs = 5) {
  let c = -1;
  for (;;) {
    c = await check();
    if (c >= n || now() > deadline) return c;
    await sleep(everyMs);
  }
}

// The worker side in a child process (--procs 2): it starts the workers,
// reports each job handed to them as [index, time] pairs, and stops them
// when the parent says so.
async function workerChild(sys, o) {
  let buf = [];
  const flush = () => { if (buf.length) { process.send({ h: buf }); buf = []; } };
  const ticker = setInterval(flush, 2);
  const cpu0 = process.cpuUsage();
  let t0 = now();
  try {
    await sys.startWorkers((i) => { buf.push(i, now()); if (buf.length >= 2000) flush(); });
  } catch (e) {
    process.send({ error: String(e && e.stack || e) });
    process.exit(1);
  }
  process.on('message', async (m) => {
    if (m.go) { t0 = now(); return; }
    if (!m.stop) return;
    flush();
    const cpu = process.cpuUsage(cpu0);
    const busyMs = (cpu.user + cpu.system) / 1000;
    let error = null;
    try { await sys.stopWorkers(); } catch (e) { error = String(e && e.stack || e); }
    flush();
    clearInterval(ticker);
    process.send({ stopped: true, busyMs, spanMs: now() - t0, error }, () => process.exit(0));
  });
  process.send({ ready: true });
}

// Starts the workers in a child process; resolves to a handle with stop().
function forkWorkers(o, ledger) {
  const { fork } = require('node:child_process');
  const child = fork(process.argv[1], process.argv.slice(2), {
    env: { ...process.env, BENCH_ROLE: 'workers' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let stopped = null;
  let onStopped = null;
  let failure = null;
  const ready = new Promise((resolve, reject) => {
    child.on('message', (m) => {
      if (m.h) { const h = m.h; for (let k = 0; k < h.length; k += 2) ledger.handle(h[k], h[k + 1]); }
      else if (m.ready) resolve();
      else if (m.error) { failure = m.error; reject(new Error(m.error)); }
      else if (m.stopped) { stopped = m; if (onStopped) onStopped(m); }
    });
    child.on('exit', (code) => {
      if (!stopped) {
        failure = failure || `worker process exited with ${code}`;
        reject(new Error(failure));
        if (onStopped) onStopped({ error: failure, busyMs: 0 });
      }
    });
  });
  return ready.then(() => ({
    go() { child.send({ go: true }); },
    failed() { return failure; },
    stop() {
      return new Promise((resolve) => {
        if (stopped) return resolve(stopped);
        onStopped = resolve;
        child.send({ stop: true });
        setTimeout(() => { if (!stopped) { child.kill('SIGKILL'); resolve({ error: 'worker process did not stop', busyMs: 0 }); } }, 30000).unref();
      });
    },
  }));
}

// Runs one benchmark. `sys` provides:
//   name, version, settings            (for the report)
//   async reset()                      (drop/recreate the store's schema or keys)
//   async startWorkers(handled)        (start the W workers; they call
//                                       handled(i) with each job's index)
//   async stopWorkers()                (throws a worker-side error if any)
//   async startProducers()
//   async add(from, to, k)             (one call of producer k; index range)
//   async completed()                  (jobs the store shows as completed)
//   async stopProducers()
// With --procs 2 (the default) the workers run in a child process (the
// libraries' usual deployment: producers in the application, workers in a
// process of their own), so that one Node event loop does not have to carry
// both sides; --procs 1 runs both in this process.
async function bench(sys, o) {
  if (process.env.BENCH_ROLE === 'workers') return workerChild(sys, o);
  const ledger = new Ledger(o.jobs);
  const wallStart = Date.now();
  let error = null;
  await sys.reset();
  let child = null;
  if (o.procs >= 2) {
    child = await forkWorkers(o, ledger);
  } else {
    await sys.startWorkers((i) => ledger.handle(i));
  }
  await sys.startProducers();
  const cpu0 = process.cpuUsage();
  const t0 = now();
  if (child) child.go();
  ledger.start = t0;
  const deadline = t0 + o.timeout * 1000;
  let timedOut = false;
  let timerId = null;
  const timer = new Promise((r) => { timerId = setTimeout(() => { timedOut = true; r(); }, o.timeout * 1000); });
  let progress = null;
  if (process.stderr.isTTY && !o.json) {
    progress = setInterval(() => {
      process.stderr.write(`\r${sys.name} ${o.shape}: added ${ledger.next}/${o.jobs}, handled ${ledger.unique}  `);
    }, 500);
  }
  const producers = runProducers(ledger, o, (a, b, k) => sys.add(a, b, k)).catch((e) => { error = error || e; });
  await Promise.race([Promise.all([producers, ledger.allHandled]), timer]);
  let done = 0;
  if (!timedOut && !error) done = await waitStore(() => sys.completed(), o.jobs, deadline);
  const t1 = now();
  clearTimeout(timerId);
  const cpu = process.cpuUsage(cpu0);
  if (progress) { clearInterval(progress); process.stderr.write('\n'); }
  await sleep(200); // let a late second hand-out of a job show up
  let childBusyMs = 0;
  if (child) {
    const st = await child.stop();
    childBusyMs = st.busyMs || 0;
    if (st.error) error = error || st.error;
  } else {
    try { await sys.stopWorkers(); } catch (e) { error = error || e; }
  }
  if (timedOut || error) done = await sys.completed().catch(() => -1);
  try { await sys.stopProducers(); } catch (e) { error = error || e; }
  const seconds = (t1 - t0) / 1000;
  const lat = ledger.latencies();
  const notHanded = o.jobs - ledger.unique;
  const lost = Math.max(notHanded, o.jobs - Math.max(0, done));
  const r = {
    system: sys.name,
    version: sys.version,
    shape: o.shape,
    jobs: o.jobs,
    producers: o.producers,
    workers: o.workers,
    batch: o.batch,
    payload: o.payload,
    procs: o.procs >= 2 ? 2 : 1,
    seconds: +seconds.toFixed(3),
    jobs_per_s: +(ledger.unique / seconds).toFixed(1),
    lost,
    duplicates: ledger.duplicates + ledger.bogus,
    store_completed: done,
    p50: lat.length ? +pct(lat, 50).toFixed(3) : null,
    p99: lat.length ? +pct(lat, 99).toFixed(3) : null,
    client_cpu_pct: +((((cpu.user + cpu.system) / 1000 + childBusyMs) / (t1 - t0)) * 100).toFixed(1),
    wall_s: +((Date.now() - wallStart) / 1000).toFixed(1),
    settings: sys.settings,
  };
  if (timedOut) r.error = `timed out after ${o.timeout}s`;
  if (error) r.error = String(error && error.stack || error);
  if (o.json) {
    console.log(JSON.stringify(r));
  } else {
    console.log(`${r.system} ${r.version} ${r.shape}: ${r.jobs} jobs in ${r.seconds}s = ${r.jobs_per_s} jobs/s, ` +
      `lost ${r.lost}, duplicates ${r.duplicates}, e2e p50 ${r.p50} ms p99 ${r.p99} ms, client CPU ${r.client_cpu_pct}% ` +
      `(${r.procs} process${r.procs > 1 ? 'es' : ''})` + (r.error ? `\nERROR: ${r.error}` : ''));
    console.log(`settings: ${JSON.stringify(r.settings)}`);
  }
  return r.lost || r.duplicates || r.error ? 1 : 0;
}

function main(makeSys, more) {
  let o;
  try {
    o = parseArgs(process.argv.slice(2), { procs: 2, ...more });
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
  let sys;
  try {
    sys = makeSys(o);
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
  bench(sys, o).then(
    (rc) => { if (process.env.BENCH_ROLE !== 'workers') process.exit(rc); },
    (e) => { console.error(e && e.stack || e); process.exit(1); },
  );
}

function pkgVersion(name) {
  const fs = require('node:fs');
  const path = require('node:path');
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules', name, 'package.json'), 'utf8')).version;
}

module.exports = { now, SHAPES, parseArgs, makePayload, Ledger, bench, main, sleep, pkgVersion, usage };

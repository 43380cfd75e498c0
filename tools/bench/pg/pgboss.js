#!/usr/bin/env node
'use strict';
// pg-boss on PostgreSQL (PGURI), in berth's load shapes.
//
//   PGURI=postgresql://... node pgboss.js --shape s1|s2 [--jobs N] [--json]
//        [--mode fetch|work] [--idle-ms MS] [--polling-s S]
//
// Producers: send() (one job per call, S1) or insert() (--batch jobs per
// call, S2). Workers, --mode fetch (the default): W loops, each calling
// fetch(queue, {batchSize: B}) and then complete(queue, ids) for what it got,
// at once again while jobs come back, sleeping --idle-ms (10) after an empty
// fetch. That is one job (S1) or up to 100 (S2) per fetch and per complete:
// the shape berth's workers have. --mode work uses the library's own loop,
// work(queue, {batchSize: B, pollingIntervalSeconds: S}): it polls at most
// once per S seconds (0.5, the least pg-boss allows), even while the queue is
// full, so a worker does at most B jobs per S seconds; it completes a batch
// without waiting for the completion to commit. Each run drops and recreates
// the pgboss schema.
const PgBoss = require('pg-boss');
const { Client } = require('pg');
const { main, makePayload, pkgVersion, sleep } = require('./common');

const SCHEMA = 'pgboss';
const QUEUE = 'bench';

function makeSys(o) {
  const uri = process.env.PGURI;
  if (!uri) throw new Error('set PGURI');
  if (o.mode !== 'fetch' && o.mode !== 'work') throw new Error('--mode is fetch or work');
  const settings = {
    mode: o.mode,
    batchSize: o.batch,
    max: { producers: o.producers + 2, workers: o.workers + 2 },
    add: o.batch > 1 ? `insert(${o.batch})` : 'send',
    queuePolicy: 'standard',
  };
  if (o.mode === 'fetch') settings.idleMs = o['idle-ms'];
  else settings.pollingIntervalSeconds = o['polling-s'];
  let boss = null;    // the producers' (and the run's) instance
  let wboss = null;   // the workers' instance
  let pg = null;
  let stopping = false;
  const loops = [];
  let workerError = null;
  const onError = (e) => { workerError = workerError || e; console.error('[pg-boss error]', e && e.message); };
  const newBoss = async (max) => {
    const b = new PgBoss({ connectionString: uri, schema: SCHEMA, max });
    b.on('error', onError);
    await b.start();
    return b;
  };

  async function fetchLoop(handled) {
    while (!stopping) {
      const jobs = await wboss.fetch(QUEUE, { batchSize: o.batch });
      if (!jobs || jobs.length === 0) { await sleep(o['idle-ms']); continue; }
      for (const j of jobs) handled(j.data.i);
      await wboss.complete(QUEUE, jobs.map((j) => j.id));
    }
  }

  return {
    name: o.mode === 'work' ? 'pg-boss (work)' : 'pg-boss',
    version: pkgVersion('pg-boss'),
    settings,
    async reset() {
      pg = new Client({ connectionString: uri });
      await pg.connect();
      await pg.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
      const b = await newBoss(2);
      await b.createQueue(QUEUE, { policy: 'standard' });
      await b.stop({ graceful: true, wait: true });
    },
    async startWorkers(handled) {
      wboss = await newBoss(o.workers + 2);
      for (let k = 0; k < o.workers; k++) {
        if (o.mode === 'fetch') {
          loops.push(fetchLoop(handled).catch(onError));
        } else {
          await wboss.work(QUEUE, { batchSize: o.batch, pollingIntervalSeconds: o['polling-s'] }, async (jobs) => {
            for (const j of jobs) handled(j.data.i);
          });
        }
      }
    },
    async stopWorkers() {
      stopping = true;
      await Promise.all(loops);
      await wboss.stop({ graceful: true, wait: true, timeout: 10000 });
      if (workerError) throw workerError;
    },
    async startProducers() {
      boss = await newBoss(o.producers + 2);
    },
    async add(from, to) {
      if (to - from === 1) {
        const id = await boss.send(QUEUE, makePayload(from, o.payload));
        if (!id) throw new Error(`send of job ${from} returned no id`);
      } else {
        const jobs = [];
        for (let i = from; i < to; i++) jobs.push({ name: QUEUE, data: makePayload(i, o.payload) });
        await boss.insert(jobs);
      }
    },
    async completed() {
      const r = await pg.query(
        `SELECT (SELECT count(*) FROM ${SCHEMA}.job WHERE name = $1 AND state = 'completed')
              + (SELECT count(*) FROM ${SCHEMA}.archive WHERE name = $1 AND state = 'completed') AS n`, [QUEUE]);
      return Number(r.rows[0].n);
    },
    async stopProducers() {
      await boss.stop({ graceful: true, wait: true, timeout: 10000 });
      await pg.end();
      if (workerError) throw workerError;
    },
  };
}

main(makeSys, { mode: 'fetch', 'idle-ms': 10, 'polling-s': 0.5 });

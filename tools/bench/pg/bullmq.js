#!/usr/bin/env node
'use strict';
// BullMQ in berth's load shapes, on Redis (the default) or on the PostgreSQL
// backend BullMQ 6 ships (--backend pg, PGURI).
//
//   REDIS_PORT=6379 node bullmq.js --shape s1|s2 [--jobs N] [--json]
//   PGURI=postgresql://... node bullmq.js --backend pg --shape s1|s2 ...
//
// Producers: P Queue instances (a connection each), add() (one job per call,
// S1) or addBulk() (--batch jobs per call, S2). Workers: W Worker instances
// (a connection each), each with concurrency 1 (S1) or --batch (S2: BullMQ
// has no batch fetch outside BullMQ Pro; its documented way to have many
// jobs in hand is the concurrency factor, and it fetches the next job in the
// same call that completes the last). Job options are BullMQ's defaults
// (completed jobs are kept, which is how the run counts them).
//
// Durability on Redis comes from the server: run redis-server with
// appendonly yes and appendfsync always (run.sh does); the run reads both
// back and reports them. Each run empties the Redis database (FLUSHDB) or
// drops and recreates the bullmq schema.
const { Queue, Worker, withBackend, createPostgresBackend } = require('bullmq');
const IORedis = require('ioredis');
const { Client } = require('pg');
const { main, makePayload, pkgVersion } = require('./common');

const QUEUE = 'bench';
const PG_SCHEMA = 'bullmq';

function makeSys(o) {
  const pg = o.backend === 'pg';
  if (!pg && o.backend !== 'redis') throw new Error('--backend is redis or pg');
  const uri = process.env.PGURI;
  if (pg && !uri) throw new Error('set PGURI');
  const port = Number(process.env.REDIS_PORT || 6379);
  const concurrency = o.batch > 1 ? o.batch : 1;
  const settings = {
    backend: pg ? 'postgresql' : 'redis',
    queues: o.producers,
    workers: o.workers,
    concurrency,
    add: o.batch > 1 ? `addBulk(${o.batch})` : 'add',
    removeOnComplete: false,
  };
  const Q = pg ? withBackend(createPostgresBackend).Queue : Queue;
  const W = pg ? withBackend(createPostgresBackend).Worker : Worker;
  const conn = () => (pg
    ? { connectionString: uri, schema: PG_SCHEMA, migrate: true }
    : { host: '127.0.0.1', port, maxRetriesPerRequest: null });
  const queues = [];
  const workers = [];
  let counter = null;
  let workerError = null;
  return {
    name: pg ? 'bullmq (postgresql)' : 'bullmq (redis)',
    version: pkgVersion('bullmq'),
    settings,
    async reset() {
      if (pg) {
        const c = new Client({ connectionString: uri });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${PG_SCHEMA} CASCADE`);
        await c.end();
      } else {
        const r = new IORedis({ host: '127.0.0.1', port, maxRetriesPerRequest: null });
        await r.flushdb();
        const aof = await r.config('GET', 'appendonly');
        const fsync = await r.config('GET', 'appendfsync');
        const info = await r.info('server');
        settings.redis = {
          version: (/redis_version:(\S+)/.exec(info) || [])[1],
          appendonly: aof[1],
          appendfsync: fsync[1],
        };
        await r.quit();
      }
      counter = new Q(QUEUE, { connection: conn() });
      await counter.waitUntilReady();
    },
    async startWorkers(handled) {
      for (let k = 0; k < o.workers; k++) {
        const w = new W(QUEUE, async (job) => { handled(job.data.i); }, { connection: conn(), concurrency });
        w.on('error', (e) => { workerError = workerError || e; console.error('[bullmq worker error]', e && e.message); });
        w.on('failed', (job, e) => { console.error('[bullmq job failed]', job && job.id, e && e.message); });
        await w.waitUntilReady();
        workers.push(w);
      }
    },
    async stopWorkers() {
      await Promise.all(workers.map((w) => w.close()));
      if (workerError) throw workerError;
    },
    async startProducers() {
      for (let k = 0; k < o.producers; k++) {
        const q = new Q(QUEUE, { connection: conn() });
        await q.waitUntilReady();
        queues.push(q);
      }
    },
    async add(from, to, k) {
      const q = queues[k]; // each producer has its own Queue (connection)
      if (to - from === 1) {
        await q.add('j', makePayload(from, o.payload));
      } else {
        const jobs = [];
        for (let i = from; i < to; i++) jobs.push({ name: 'j', data: makePayload(i, o.payload) });
        await q.addBulk(jobs);
      }
    },
    async completed() {
      const c = await counter.getJobCounts('completed');
      return c.completed;
    },
    async stopProducers() {
      await Promise.all(queues.map((q) => q.close()));
      settings.final_counts = await counter.getJobCounts();
      await counter.close();
    },
  };
}

main(makeSys, { backend: 'redis' });

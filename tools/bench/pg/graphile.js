#!/usr/bin/env node
'use strict';
// graphile-worker on PostgreSQL (PGURI), in berth's load shapes.
//
//   PGURI=postgresql://... node graphile.js --shape s1|s2 [--jobs N] [--json]
//        [--pools K] [--concurrency C] [--local-queue L] [--complete-delay MS]
//
// Producers add through WorkerUtils: addJob (one job per call, S1) or addJobs
// (--batch jobs per call, S2). Workers are K graphile-worker pools (run()),
// each running C jobs at a time. S1 defaults: 1 pool x 8, every worker
// fetching and completing one job per query (the library's defaults).
// S2 defaults: 4 pools x 24 with the batching the library documents for
// throughput: localQueue (each pool locks and fetches up to L = 100 jobs per
// query) and completeJobBatchDelay 0 (completions of one tick go in one
// query). Each run drops and recreates the graphile_worker schema.
const { run, makeWorkerUtils, Logger } = require('graphile-worker');
const { Client } = require('pg');
const { main, makePayload, pkgVersion } = require('./common');

const SCHEMA = 'graphile_worker';

// Library log lines at warning and above go to stderr; the per-job info
// lines are dropped (they would cost more than the jobs).
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`[graphile-worker ${level}] ${message}`);
});

function makeSys(o) {
  const uri = process.env.PGURI;
  if (!uri) throw new Error('set PGURI');
  const s2 = o.shape === 's2';
  const pools = o.pools > 0 ? o.pools : (s2 ? o.workers : 1);
  const concurrency = o.concurrency > 0 ? o.concurrency : (s2 ? 24 : o.workers);
  const localQueue = o['local-queue'] !== -2 ? o['local-queue'] : (s2 ? o.batch : -1);
  const completeDelay = o['complete-delay'] !== -2 ? o['complete-delay'] : (s2 ? 0 : -1);
  const settings = {
    pools,
    concurrentJobs: concurrency,
    maxPoolSize: Math.max(10, concurrency + 1),
    localQueue: localQueue > 0 ? { size: localQueue } : 'off',
    completeJobBatchDelay: completeDelay,
    failJobBatchDelay: completeDelay,
    pollInterval: 2000,
    useNodeTime: false,
    preparedStatements: true,
    producerPoolSize: o.producers + 2,
    add: o.batch > 1 ? `addJobs(${o.batch})` : 'addJob',
  };
  let utils = null;
  const runners = [];
  let pg = null;
  return {
    name: 'graphile-worker',
    version: pkgVersion('graphile-worker'),
    settings,
    async reset() {
      pg = new Client({ connectionString: uri });
      await pg.connect();
      await pg.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
      const u = await makeWorkerUtils({ connectionString: uri, logger });
      await u.migrate();
      await u.release();
    },
    async startWorkers(handled) {
      const taskList = {
        bench: async (payload) => { handled(payload.i); },
      };
      for (let k = 0; k < pools; k++) {
        const worker = {
          connectionString: uri,
          concurrentJobs: concurrency,
          maxPoolSize: settings.maxPoolSize,
          pollInterval: settings.pollInterval,
          useNodeTime: settings.useNodeTime,
          preparedStatements: settings.preparedStatements,
          completeJobBatchDelay: completeDelay,
          failJobBatchDelay: completeDelay,
        };
        if (localQueue > 0) worker.localQueue = { size: localQueue };
        runners.push(await run({ taskList, logger, noHandleSignals: true, preset: { worker } }));
      }
    },
    async stopWorkers() {
      await Promise.all(runners.map((r) => r.stop()));
    },
    async startProducers() {
      utils = await makeWorkerUtils({ connectionString: uri, maxPoolSize: settings.producerPoolSize, logger });
    },
    async add(from, to) {
      if (to - from === 1) {
        await utils.addJob('bench', makePayload(from, o.payload));
      } else {
        const specs = [];
        for (let i = from; i < to; i++) specs.push({ identifier: 'bench', payload: makePayload(i, o.payload) });
        await utils.addJobs(specs);
      }
    },
    async completed() {
      // Completed jobs are deleted; a failed one stays with its error.
      const r = await pg.query(`SELECT count(*)::int AS n FROM ${SCHEMA}._private_jobs`);
      return o.jobs - r.rows[0].n;
    },
    async stopProducers() {
      await utils.release();
      await pg.end();
    },
  };
}

main(makeSys, { pools: 0, concurrency: 0, 'local-queue': -2, 'complete-delay': -2 });

#!/usr/bin/env node
'use strict';
// Prints the results of run.sh (one JSON object a line, from the scripts'
// --json output) as one table.
//
//   node table.js RESULTS.jsonl
const fs = require('node:fs');

const file = process.argv[2];
if (!file) { console.error('usage: node table.js RESULTS.jsonl'); process.exit(2); }
const rows = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const cols = [
  ['system', (r) => r.system],
  ['shape', (r) => r.shape],
  ['jobs', (r) => String(r.jobs)],
  ['jobs/s', (r) => (r.jobs_per_s == null ? '-' : r.jobs_per_s.toFixed(1))],
  ['lost', (r) => String(r.lost ?? '-')],
  ['duplicates', (r) => String(r.duplicates ?? '-')],
  ['p50 ms', (r) => (r.p50 == null ? '-' : r.p50.toFixed(1))],
  ['p99 ms', (r) => (r.p99 == null ? '-' : r.p99.toFixed(1))],
  ['client CPU', (r) => (r.client_cpu_pct == null ? '-' : `${r.client_cpu_pct}%`)],
  ['run s', (r) => String(r.wall_s ?? '-')],
  ['note', (r) => (r.error ? `ERROR ${String(r.error).split('\n')[0].slice(0, 80)}` : '')],
];
const cells = rows.map((r) => cols.map(([, f]) => f(r)));
const width = cols.map(([h], k) => Math.max(h.length, ...cells.map((c) => c[k].length)));
const line = (c) => c.map((v, k) => (k < 2 || k === cols.length - 1 ? v.padEnd(width[k]) : v.padStart(width[k]))).join('  ').trimEnd();
console.log(line(cols.map(([h]) => h)));
console.log(line(width.map((w) => '-'.repeat(w))));
for (const c of cells) console.log(line(c));

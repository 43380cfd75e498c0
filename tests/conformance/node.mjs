// The conformance suite's driver for the Node client (tools/clients/node).
//
//   node tests/conformance/node.mjs OPERATE_URL [scenarios.json]
//
// Runs every scenario against the berthd at OPERATE_URL; prints one line per
// scenario and exits non-zero if any failed. See scenarios.json for the
// format and the results each step must produce.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const { BerthError, Client } = await import(
  path.join(here, "..", "..", "tools", "clients", "node", "src", "index.js"));

/** A result's value that steps pass back to the client as it was. */
class Native {
  constructor(obj, shown) {
    this.obj = obj;
    this.shown = shown;
  }
}

const text = (b) => Buffer.from(b).toString("utf8");
const showError = (e) => ({ code: e.codeName, verdict: e.verdict ?? null, field: e.field ?? null,
  limit: e.limit ?? null, message: e.statusMessage });
const showTask = (t) => new Native(t, {
  id: t.id, topic: t.topic, payload: text(t.payload), headers: t.headers,
  content_type: t.contentType, instance_id: t.instanceId, attempt: t.attempt,
  retries_left: t.retriesLeft, priority: t.priority,
});

function plain(v) {
  if (v instanceof Native) return plain(v.shown);
  if (Array.isArray(v)) return v.map(plain);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

/** The value at path p in v; throws when v has no such path. */
function lookup(v, p) {
  for (const part of p ? p.split(".") : []) {
    if (v instanceof Native) v = v.shown;
    if (v === null || typeof v !== "object") throw new Error(`no ${p} in the result`);
    if (part === "#") return v.length;
    const key = Array.isArray(v) ? Number(part) : part;
    if (!(key in v)) throw new Error(`no ${p} in the result`);
    v = v[key];
  }
  return v;
}

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const camelKeys = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [camel(k), v]));
const result = (r) => (r === undefined || r === null || typeof r === "string" ? r
  : { payload: r.payload ?? "", contentType: r.content_type, headers: r.headers });

class Run {
  constructor(client) {
    this.c = client;
    this.vars = {};
  }

  arg(v) {
    if (typeof v === "string" && v.startsWith("$")) {
      const dot = v.indexOf(".");
      const [name, p] = dot < 0 ? [v.slice(1), ""] : [v.slice(1, dot), v.slice(dot + 1)];
      const got = lookup(this.vars[name], p);
      return got instanceof Native ? got.obj : got;
    }
    if (Array.isArray(v)) return v.map((x) => this.arg(x));
    if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.arg(x)]));
    return v;
  }

  async do(s) {
    const c = this.c;
    switch (s.do) {
      case "sleep":
        await new Promise((r) => setTimeout(r, s.ms));
        return {};
      case "submit": {
        const r = await c.submit(s.topic, s.payload ?? "", camelKeys({
          headers: s.headers, content_type: s.content_type, idempotency_key: s.idempotency_key,
          delay_ms: s.delay_ms, not_before_ms: s.not_before_ms, priority: s.priority,
        }));
        return { id: r.id, duplicate: r.duplicate };
      }
      case "submit_batch": {
        const r = await c.submitBatch(s.items.map(camelKeys));
        return { items: r.map((x) => ({ id: x.id, duplicate: x.duplicate })) };
      }
      case "call": {
        const r = await c.call(s.topic, s.payload ?? "", { retry: s.retry && camelKeys(s.retry) });
        return { instance_id: r.instanceId, duplicate: r.duplicate };
      }
      case "await_call": {
        const r = await c.awaitCall(s.instance_id, { waitMs: s.wait_ms });
        return {
          state: r.state, attempt: r.attempt,
          result: r.result && { payload: text(r.result.payload), content_type: r.result.contentType, headers: r.result.headers },
          error: r.error && { code: r.error.code, message: r.error.message },
        };
      }
      case "fetch": {
        const r = await c.fetch(s.topics, {
          maxTasks: s.max_tasks, lockMs: s.lock_ms, waitMs: s.wait_ms, workerId: s.worker_id,
          completes: (s.completes ?? []).map((x) => [x.task, result(x.result)]),
        });
        return { tasks: r.map(showTask), complete_errors: r.completeErrors.map((e) => e && showError(e)) };
      }
      case "complete":
        await c.complete(s.task, result(s.result));
        return {};
      case "complete_batch": {
        const errs = await c.completeBatch(s.items.map((x) => [x.task, result(x.result)]));
        return { errors: errs.map((e) => e && showError(e)) };
      }
      case "fail": {
        const r = await c.fail(s.task, s.error, { retryInMs: s.retry_in_ms, retriesLeft: s.retries_left });
        return { terminal: r.terminal, retries_left: r.retriesLeft };
      }
      case "refuse":
        await c.refuse(s.task, s.error);
        return {};
      case "extend_lock":
        return { lock_expires_at_ms: await c.extendLock(s.task, s.lock_ms) };
      case "release":
        await c.release(s.task);
        return {};
      case "worker_loop":
        return this.workerLoop(s.topic, s.count, s.lock_ms);
      default:
        throw new Error(`unknown step ${s.do}`);
    }
  }

  async workerLoop(topic, count, lockMs) {
    const c = this.c;
    for (let first = 0; first < count; first += 100) {
      const n = Math.min(100, count - first);
      await c.submitBatch(Array.from({ length: n }, (_, i) => ({ topic, payload: String(first + i) })));
    }
    const seen = new Map();
    const w = c.worker(topic, { maxTasks: 50, waitMs: 500, lockMs, signal: AbortSignal.timeout(120_000) });
    for await (const task of w) {
      const p = text(task.payload);
      seen.set(p, (seen.get(p) ?? 0) + 1);
      setTimeout(() => task.complete(), 0); // (later, as work done elsewhere would be)
      if (seen.size === count) w.stop();
    }
    await new Promise((r) => setTimeout(r, lockMs + 300)); // a lost completion shows
    const left = (await c.fetch(topic, { maxTasks: 1000, waitMs: 0 })).length;
    return { handled: [...seen.values()].reduce((a, b) => a + b, 0), distinct: seen.size, left };
  }

  async step(s) {
    const args = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "expect" && k !== "as")
      .map(([k, v]) => [k, this.arg(v)]));
    let got;
    try {
      got = await this.do(args);
    } catch (e) {
      if (!(e instanceof BerthError)) throw e;
      got = { refused: showError(e) };
    }
    if (s.as) this.vars[s.as] = got;
    const expect = s.expect ?? {};
    if (got.refused && !Object.keys(expect).some((k) => k.startsWith("refused."))) {
      throw new Error(`${s.do}: refused: ${JSON.stringify(got.refused)}`);
    }
    for (const [p, w] of Object.entries(expect)) {
      const want = this.arg(w);
      const have = plain(lookup(got, p));
      if (!isDeepStrictEqual(have, want)) {
        throw new Error(`${s.do}: ${p} is ${JSON.stringify(have)}, not ${JSON.stringify(want)}`);
      }
    }
  }
}

const url = process.argv[2];
const suite = JSON.parse(readFileSync(process.argv[3] ?? path.join(here, "scenarios.json"), "utf8"));
const client = new Client(url, { workerId: "conformance-node" });
let failed = 0;
for (const sc of suite.scenarios) {
  const run = new Run(client);
  run.vars.T = `conf-node-${randomUUID().slice(0, 12)}`;
  try {
    for (const s of sc.steps) await run.step(s);
    console.log(`ok      ${sc.name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED  ${sc.name}: ${e instanceof Error && !(e instanceof BerthError) && e.stack && !e.message.includes(": ") ? e.stack : e.message}`);
  }
}
client.close();
console.log(`node: ${suite.scenarios.length - failed} of ${suite.scenarios.length} passed`);
process.exit(failed ? 1 : 0);

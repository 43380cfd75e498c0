// The Node client against a real berthd, on each of its operate servers
// (its own SP server, and nng's REP socket with --operate-nng), and ipc://.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import {
  Cancelled, Client, InvalidArgument, LockHeld, LockLost, NotFound, Refuse, Terminal, TransportError,
} from "../src/index.js";
import { startBerthd } from "./berthd.js";

const topic = () => `node-${randomUUID().slice(0, 12)}`;

async function fetchOne(c, t, opts = {}) {
  const got = await c.fetch(t, { maxTasks: 1, waitMs: 2000, ...opts });
  assert.equal(got.length, 1);
  return got[0];
}

for (const [name, flags] of [["berth's SP server", []], ["--operate-nng", ["--operate-nng"]]]) {
  describe(`over ${name}`, () => {
    let b, c;
    before(async () => {
      b = await startBerthd("--backoff-initial-ms", "1", "--backoff-max-ms", "10", "--retries", "2", ...flags);
      c = new Client(b.operate, { workerId: "node-test" });
    });
    after(async () => {
      c.close();
      await b.stop();
    });

    test("submit, fetch, complete; a repeat is NOT_FOUND", async () => {
      const t = topic();
      const s = await c.submit(t, "hello", { headers: { k: "v" }, contentType: "text/plain" });
      assert.equal(s.id.length, 32);
      assert.equal(s.duplicate, false);
      const task = await fetchOne(c, t, { lockMs: 5000 });
      assert.equal(task.id, s.id);
      assert.deepEqual(task.payload, Buffer.from("hello"));
      assert.deepEqual(task.headers, { k: "v" });
      assert.equal(task.contentType, "text/plain");
      assert.equal(task.attempt, 1);
      assert.equal(task.workerId, "node-test");
      assert.ok(task.lockExpiresAtMs > Date.now());
      await c.complete(task);
      await assert.rejects(c.complete(task), (e) => e instanceof NotFound && e.verdict === "NOT_FOUND");
      assert.equal((await c.fetch(t, { waitMs: 0 })).length, 0);
    });

    test("idempotency keys, batches and priority", async () => {
      const t = topic();
      const a = await c.submit(t, "1", { idempotencyKey: "order-7" });
      const d = await c.submit(t, "2", { idempotencyKey: "order-7" });
      assert.equal(d.duplicate, true);
      assert.equal(d.id, a.id);
      const r = await c.submitBatch([{ topic: t, payload: "x" }, { topic: t, payload: Buffer.from([0, 255]), priority: 0 }]);
      assert.equal(r.length, 2);
      const got = await c.fetch(t, { maxTasks: 5, waitMs: 2000 });
      assert.deepEqual(got[0].payload, Buffer.from([0, 255]));
      assert.equal(got.length, 3);
      assert.deepEqual(await c.completeBatch(got), [null, null, null]);
    });

    test("bounds are INVALID_ARGUMENT naming the field and the limit", async () => {
      await assert.rejects(c.fetch(topic(), { maxTasks: 1_000_000, waitMs: 0 }),
        (e) => e instanceof InvalidArgument && e.field === "max_tasks" && e.limit === 1000 && e.code === 3);
      await assert.rejects(c.submit("", "x"), (e) => e instanceof InvalidArgument && e.field === "topic");
    });

    test("verdicts: LOCK_HELD, LOCK_LOST, TERMINAL", async () => {
      const t = topic();
      await c.submit(t, "x");
      const first = await fetchOne(c, t, { lockMs: 100 });
      await new Promise((r) => setTimeout(r, 300));
      const second = await fetchOne(c, t, { lockMs: 5000, workerId: "other" });
      assert.equal(second.attempt, 2);
      await assert.rejects(c.complete(first), LockHeld);
      await c.release(second);
      await assert.rejects(c.complete(second), (e) => e instanceof LockLost && e.verdict === "LOCK_LOST");
      const third = await fetchOne(c, t);
      const f = await c.fail(third, { code: "Boom", message: "no" }, { retriesLeft: 0 });
      assert.equal(f.terminal, true);
      await assert.rejects(c.complete(third), Terminal);
    });

    test("extendLock, refuse, and a fused fetch's statuses", async () => {
      const t = topic();
      await c.submitBatch([{ topic: t, payload: "1" }, { topic: t, payload: "2" }]);
      const a = await fetchOne(c, t, { lockMs: 1000 });
      const until = await c.extendLock(a, 20_000);
      assert.ok(until >= Date.now() + 15_000);
      assert.equal(a.lockExpiresAtMs, until);
      const got = await c.fetch(t, { maxTasks: 5, waitMs: 2000, completes: [a] });
      assert.deepEqual(got.completeErrors, [null]);
      assert.equal(got.length, 1);
      await c.refuse(got[0], { code: "Bad", message: "cannot" });
      const again = await c.fetch(t, { waitMs: 0, completes: [a] });
      assert.ok(again.completeErrors[0] instanceof NotFound);
    });

    test("a call resolves with the worker's result", async () => {
      const t = topic();
      const call = await c.call(t, "2+2", { retry: { timeoutMs: 60_000, maxAttempts: 3 } });
      const pending = await c.awaitCall(call.instanceId, { waitMs: 0 });
      assert.equal(pending.state, "WAITING");
      const task = await fetchOne(c, t);
      assert.equal(task.instanceId, call.instanceId);
      await c.complete(task, { payload: "4", contentType: "text/plain", headers: { h: "1" } });
      const done = await c.awaitCall(call.instanceId, { waitMs: 5000 });
      assert.equal(done.state, "RESOLVED");
      assert.equal(done.done, true);
      assert.deepEqual(done.result, { payload: Buffer.from("4"), contentType: "text/plain", headers: { h: "1" } });
    });

    test("an AbortSignal ends a long poll", async () => {
      const t0 = Date.now();
      await assert.rejects(c.fetch(topic(), { waitMs: 20_000, signal: AbortSignal.timeout(200) }), Cancelled);
      assert.ok(Date.now() - t0 < 5000);
    });

    test("the async-iterator worker and run(handler)", async () => {
      const t = topic();
      await c.submitBatch(Array.from({ length: 30 }, (_, i) => ({ topic: t, payload: `ok-${i}` })));
      const seen = new Map();
      const w = c.worker(t, { maxTasks: 7, waitMs: 200 });
      for await (const task of w) {
        seen.set(task.payload.toString(), (seen.get(task.payload.toString()) ?? 0) + 1);
        task.complete();
        if (seen.size === 30) w.stop();
      }
      assert.equal(seen.size, 30);
      assert.ok([...seen.values()].every((n) => n === 1));
      assert.equal((await c.fetch(t, { waitMs: 0 })).length, 0); // all kept

      await c.submitBatch([{ topic: t, payload: "raise" }, { topic: t, payload: "refuse" }]);
      const call = await c.call(t, "answer me");
      const counts = new Map();
      const w2 = c.worker(t, { waitMs: 200 });
      const running = w2.run(async (task) => {
        const p = task.payload.toString();
        counts.set(p, (counts.get(p) ?? 0) + 1);
        if (p === "raise") throw new RangeError("no good");
        if (p === "refuse") throw new Refuse("Unwanted", "never");
        return "answered";
      });
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline && !((counts.get("raise") ?? 0) >= 2 && counts.has("refuse") && counts.has("answer me"))) {
        await new Promise((r) => setTimeout(r, 50));
      }
      w2.stop();
      await running;
      assert.equal(counts.get("raise"), 2); // --retries 2, then terminal
      assert.equal(counts.get("refuse"), 1);
      const res = await c.awaitCall(call.instanceId, { waitMs: 5000 });
      assert.deepEqual(res.result.payload, Buffer.from("answered"));
    });

    test("completions made while a fetch is out are kept; a handler may answer its own task", { timeout: 30_000 }, async () => {
      const t = topic();
      await c.submitBatch(Array.from({ length: 20 }, (_, i) => ({ topic: t, payload: `a-${i}` })));
      const w = c.worker(t, { maxTasks: 3, waitMs: 100, lockMs: 1000 });
      const seen = new Set();
      for await (const task of w) {
        seen.add(task.payload.toString());
        setTimeout(() => task.complete(), 5); // later: while the next fetch is out
        if (seen.size === 20) w.stop();
      }
      await new Promise((r) => setTimeout(r, 1300)); // past every lock: a lost completion shows
      assert.equal((await c.fetch(t, { maxTasks: 50, waitMs: 0 })).length, 0);

      await c.submitBatch([{ topic: t, payload: "self" }, { topic: t, payload: "number" }]);
      const w2 = c.worker(t, { waitMs: 100 });
      const outcomes = [];
      await w2.run(async (task) => {
        const p = task.payload.toString();
        outcomes.push(p);
        if (outcomes.length === 2) w2.stop();
        if (p === "self") return task.refuse("Mine", "answered by the handler");
        return 42; // not a result: the task fails, the worker goes on
      });
      assert.deepEqual(outcomes.sort(), ["number", "self"]);
      const again = await c.fetch(t, { waitMs: 2000 }); // the failed one, retried
      assert.equal(again.length, 1);
      assert.equal(again[0].payload.toString(), "number");
      assert.equal(again[0].attempt, 2);
      await c.complete(again[0]);
    });

    test("an idle client does not keep its process alive", { timeout: 20_000 }, async () => {
      const { execFile } = await import("node:child_process");
      const index = new URL("../src/index.js", import.meta.url).href;
      const script = `import { Client } from ${JSON.stringify(index)};
        const c = new Client(${JSON.stringify(b.operate)});
        await c.submit("idle-exit", "x"); // and no close()
        console.log("done");`;
      const out = await new Promise((resolve, reject) => {
        execFile(process.execPath, ["--input-type=module", "-e", script], { timeout: 10_000 },
          (err, stdout) => (err ? reject(err) : resolve(stdout)));
      });
      assert.equal(out.trim(), "done");
    });

    test("breaking out of the loop releases the tasks not handed out", async () => {
      const t = topic();
      await c.submitBatch(Array.from({ length: 5 }, (_, i) => ({ topic: t, payload: `b-${i}` })));
      for await (const task of c.worker(t, { maxTasks: 5, waitMs: 1000, lockMs: 60_000 })) {
        task.complete();
        break;
      }
      assert.equal((await c.fetch(t, { maxTasks: 10, waitMs: 0 })).length, 4);
    });

    test("run() extends the lock of a slow handler", async () => {
      const t = topic();
      await c.submit(t, "slow");
      const attempts = [];
      const w = c.worker(t, { lockMs: 1000, waitMs: 200 });
      await w.run(async (task) => {
        attempts.push(task.attempt);
        await new Promise((r) => setTimeout(r, 3500)); // three and a half locks
        w.stop();
      });
      assert.deepEqual(attempts, [1]);
      assert.equal((await c.fetch(t, { waitMs: 0 })).length, 0);
    });
  });
}

test("ipc://", async () => {
  const sock = path.join(os.tmpdir(), `berth-node-${randomUUID().slice(0, 8)}.sock`);
  const b = await startBerthd("--operate", `ipc://${sock}`);
  const c = new Client(b.operate);
  try {
    const t = topic();
    const s = await c.submit(t, "over ipc");
    const got = await c.fetch(t, { waitMs: 2000 });
    assert.equal(got[0].id, s.id);
    assert.deepEqual(await c.completeBatch(got), [null]);
  } finally {
    c.close();
    await b.stop();
  }
});

test("unreachable is a TransportError", async () => {
  const c = new Client("tcp://127.0.0.1:1", { timeoutMs: 2000 });
  await assert.rejects(c.submit("t", "x"), (e) => e instanceof TransportError && e.code === 14);
  c.close();
});

test("after berthd restarts, the next request dials again", async () => {
  const sock = path.join(os.tmpdir(), `berth-node-${randomUUID().slice(0, 8)}.sock`);
  let b = await startBerthd("--operate", `ipc://${sock}`);
  const c = new Client(`ipc://${sock}`, { timeoutMs: 5000 });
  try {
    await c.submit(topic(), "before");
    await b.stop();
    await assert.rejects(c.submit(topic(), "while down"), TransportError);
    b = await startBerthd("--operate", `ipc://${sock}`);
    const t = topic();
    const s = await c.submit(t, "after");
    const got = await c.fetch(t, { waitMs: 2000 });
    assert.equal(got[0].id, s.id);
  } finally {
    c.close();
    await b.stop();
  }
});

test("completions too big to ride on one fetch go one at a time", { timeout: 30_000 }, async () => {
  const b = await startBerthd("--max-message-bytes", "65536", "--payload-max-bytes", "40000");
  const c = new Client(b.operate);
  try {
    const t = topic();
    await c.submitBatch(Array.from({ length: 8 }, (_, i) => ({ topic: t, payload: `big-${i}` })));
    const w = c.worker(t, { maxTasks: 4, waitMs: 200, lockMs: 1000 });
    let n = 0;
    await w.run(async () => {
      if (++n === 8) w.stop();
      return Buffer.alloc(30_000, 7); // four of them are over the 64 KiB request bound
    });
    await new Promise((r) => setTimeout(r, 1300));
    assert.equal((await c.fetch(t, { maxTasks: 10, waitMs: 0 })).length, 0);
  } finally {
    c.close();
    await b.stop();
  }
});

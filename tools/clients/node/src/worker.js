// Worker: long-polls topics and hands out their tasks, as an async iterable
// or to a handler (run()).
//
//   for await (const task of client.worker("emails", { maxTasks: 10 })) {
//     try { await send(task.payload); task.complete(); }
//     catch (e) { await task.fail(e); }
//   }
//
// task.complete(result) is carried on the worker's next fetch (one round
// trip per batch); how it went is told to onCompletionError when it was
// not kept. task.fail(), task.refuse(), task.extendLock() and
// task.release() are requests of their own. The loop ends after the fetch
// in progress (within waitMs) once stop() is called or the signal aborts,
// and completes what was done.
//
// A Worker works through the Client it is given (client.worker() passes
// itself): this file calls that object's methods and imports nothing from
// client.js, which imports it.

import { Aborted, BerthError, NotFound, ResourceExhausted, Terminal, TransportError, Unavailable } from "./errors.js";
import { resultFields } from "./fields.js";

// berthd's bounds on an error (engine/check.h): longer is cut, at a
// character boundary.
const ERROR_CODE_MAX = 128;
const ERROR_MESSAGE_MAX = 4096;
const ERROR_DETAILS_MAX = 65536;

function cut(s, limit) {
  const b = Buffer.from(String(s ?? ""), "utf8");
  if (b.length <= limit) return String(s ?? "");
  return new TextDecoder("utf-8", { fatal: false }).decode(b.subarray(0, limit)).replace(/\uFFFD$/, "");
}

/** Throw from a run() handler to refuse its task: it can never be done. */
export class Refuse extends Error {
  constructor(code, message = "", details = "") {
    super(message || code);
    this.name = "Refuse";
    this.code = code;
    this.details = details;
  }
}

/** An Error (or anything thrown) as a task's failure. */
export function errorOf(e) {
  if (e instanceof Refuse) return { code: cut(e.code, ERROR_CODE_MAX), message: cut(e.message, ERROR_MESSAGE_MAX), details: cut(e.details, ERROR_DETAILS_MAX) };
  if (e instanceof Error) return { code: cut(e.name || "Error", ERROR_CODE_MAX), message: cut(e.message, ERROR_MESSAGE_MAX), details: cut(e.stack ?? "", ERROR_DETAILS_MAX) };
  return { code: "Error", message: cut(String(e), ERROR_MESSAGE_MAX), details: "" };
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const done = () => {
    clearTimeout(t);
    signal?.removeEventListener("abort", done);
    resolve();
  };
  const t = setTimeout(done, ms);
  signal?.addEventListener("abort", done, { once: true });
});

export class WorkerTask {
  #worker;
  #answered = false;

  constructor(worker, task) {
    this.#worker = worker;
    Object.assign(this, task);
  }

  /** Completes the task with the worker's next fetch (result: a call's answer;
   * once the loop has ended, in a request of its own). */
  complete(result) {
    const r = resultFields(result); // (a result of the wrong kind throws here, unanswered)
    this.#once();
    this.#worker._queue(this, r);
  }

  /** complete(), fail(), refuse() or release() has been called. */
  get answered() {
    return this.#answered;
  }

  /** Fails it (an Error, or { code, message, details }): retried after its backoff. */
  async fail(error, opts) {
    this.#once();
    const e = error instanceof Error || typeof error !== "object" ? errorOf(error) : error;
    return this.#worker.client.fail(this, e, opts);
  }

  /** Refuses it for good (a call resolves with this error). */
  async refuse(code, message = "", details = "") {
    this.#once();
    return this.#worker.client.refuse(this, errorOf(new Refuse(code, message, details)));
  }

  async extendLock(lockMs) {
    return this.#worker.client.extendLock(this, lockMs ?? this.#worker.lockMs);
  }

  async release() {
    this.#once();
    return this.#worker.client.release(this);
  }

  #once() {
    if (this.#answered) throw new Error(`task ${this.id} was answered already`);
    this.#answered = true;
  }
}

export class Worker {
  #topics;
  #stopped = false;
  #ended = false; // the loop is over: a completion goes alone
  #done = []; // [task, result] to carry on the next fetch

  constructor(client, topics, { maxTasks = 1, lockMs, waitMs = 5_000, signal, retryPauseMs = 500,
    onCompletionError = (task, err) => console.warn(`berth: task ${task.id}: completion not kept: ${err.message}`) } = {}) {
    this.client = client;
    this.#topics = typeof topics === "string" ? [topics] : [...topics];
    this.maxTasks = maxTasks;
    this.lockMs = lockMs;
    this.waitMs = waitMs;
    this.signal = signal;
    this.retryPauseMs = retryPauseMs;
    this.onCompletionError = onCompletionError;
    signal?.addEventListener("abort", () => this.stop(), { once: true });
    if (signal?.aborted) this.stop();
  }

  stop() {
    this.#stopped = true;
  }

  _queue(task, result) {
    if (!this.#ended) {
      this.#done.push([task, result]);
      return;
    }
    this.client.complete(task, result).catch((err) => {
      if (!(err instanceof BerthError)) throw err;
      this.onCompletionError(task, err);
    });
  }

  // Completions one request at a time: when a fetch carrying them all was
  // too big (each is under the payload bound; together they need not be).
  async #completeEach(done) {
    for (const [task, result] of done) {
      try {
        await this.client.complete(task, result);
      } catch (err) {
        if (!(err instanceof BerthError)) throw err;
        if (err instanceof TransportError || err instanceof Unavailable) return done.slice(done.indexOf(task));
        this.onCompletionError(task, err);
      }
    }
    return [];
  }

  #report(done, errs) {
    errs.forEach((err, i) => { if (err) this.onCompletionError(done[i][0], err); });
  }

  async *[Symbol.asyncIterator]() {
    let pause = this.retryPauseMs;
    let unseen = []; // fetched, not handed out yet: released if the loop ends early
    try {
      while (!this.#stopped) {
        // Completions queued from now on (while this fetch is out) ride on
        // the next one.
        const done = this.#done;
        this.#done = [];
        let got;
        try {
          got = await this.client.fetch(this.#topics, { maxTasks: this.maxTasks, lockMs: this.lockMs,
            waitMs: this.waitMs, completes: done });
        } catch (e) {
          if (e instanceof ResourceExhausted && done.length > 0) {
            // Too big together (or berthd is short of room): one at a time.
            this.#done = (await this.#completeEach(done)).concat(this.#done);
            continue;
          }
          // The completions may or may not have been kept: they go again
          // with the next fetch (a kept one is then NOT_FOUND, and told).
          this.#done = done.concat(this.#done);
          if (!(e instanceof TransportError || e instanceof Unavailable || e instanceof ResourceExhausted)) throw e;
          await sleep(pause, this.signal);
          pause = Math.min(pause * 2, 30_000);
          continue;
        }
        pause = this.retryPauseMs;
        this.#report(done, got.completeErrors);
        unseen = got.map((t) => new WorkerTask(this, t));
        while (unseen.length > 0) yield unseen.shift();
      }
    } finally {
      this.#ended = true;
      await Promise.all(unseen.map((t) => t.release().catch(() => {})));
      const done = this.#done;
      this.#done = [];
      if (done.length > 0) {
        try {
          this.#report(done, await this.client.completeBatch(done));
        } catch (e) {
          if (!(e instanceof BerthError)) throw e;
          await this.#completeEach(done);
        }
      }
    }
  }

  /**
   * Runs handler(task) on every task until stop(): its return value
   * completes the task (undefined: no result), a thrown Refuse refuses it,
   * anything else thrown fails it (the error's name, message and stack).
   * While a handler runs, the lock is extended every third of it.
   */
  async run(handler) {
    for await (const task of this) {
      // A third of the lock: as asked for, else as berthd's clock gave it
      // (this machine's clock may be off from berthd's).
      const period = Math.max(this.lockMs !== undefined ? this.lockMs / 3
        : (task.lockExpiresAtMs - Date.now()) / 3, 100);
      let lost = null;
      const timer = setInterval(() => {
        task.extendLock().catch((e) => {
          if (e instanceof Aborted || e instanceof NotFound || e instanceof Terminal) {
            lost = e;
            clearInterval(timer);
          }
        });
      }, period);
      try {
        const result = await handler(task);
        // (A handler may have answered its task itself.)
        if (lost === null && !task.answered) task.complete(result);
      } catch (e) {
        if (task.answered) continue; // its own answer stands
        try {
          if (e instanceof Refuse) await task.refuse(e.code, e.message, e.details);
          else await task.fail(e);
        } catch (err) {
          if (!(err instanceof BerthError)) throw err;
          this.onCompletionError(task, err);
        }
      } finally {
        clearInterval(timer);
      }
    }
  }
}

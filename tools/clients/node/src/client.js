// Client: berth's operate surface, one async method per operate method.

import os from "node:os";
import { ReqConnection, SpError } from "./sp.js";
import { decodeResponse, encodeRequest } from "./proto.js";
import { BerthError, Cancelled, Code, TransportError, fromStatus } from "./errors.js";
import { bytes, resultFields } from "./fields.js";
import { Worker } from "./worker.js";

/** berthd's ceiling for wait_ms (--wait-max-ms, 30 s by default): what a
 * fetch or await that names no wait may take before its answer. */
export const WAIT_MAX_MS = 30_000;

function submitFields(topic, payload, o = {}) {
  const m = { topic, payload: bytes(payload) };
  if (o.headers) m.headers = { ...o.headers };
  for (const k of ["contentType", "idempotencyKey", "delayMs", "notBeforeMs", "priority"]) {
    if (o[k] !== undefined && o[k] !== null) m[k] = o[k];
  }
  return m;
}

const errorFields = (e) => ({ code: e.code, message: e.message ?? "", details: e.details ?? "" });

function toResult(r) {
  return r === undefined ? null
    : { payload: r.payload ?? Buffer.alloc(0), contentType: r.contentType ?? null, headers: r.headers ?? {} };
}

export class Client {
  #conn;

  /**
   * url: tcp://host:port or ipc:///path (berthd's operate surface, either
   * of its servers). Requests are pipelined on one connection; a lost
   * connection is dialled again by the next request.
   */
  constructor(url, { timeoutMs = 10_000, workerId, recvMax } = {}) {
    this.url = url;
    this.timeoutMs = timeoutMs;
    this.workerId = workerId ?? `${os.hostname()}-${process.pid}`;
    this.#conn = new ReqConnection(url, { recvMax });
  }

  close() {
    this.#conn.close();
  }

  async #call(method, msg, { waitMs = 0, signal } = {}) {
    const timeoutMs = this.timeoutMs + waitMs;
    let raw;
    try {
      raw = await this.#conn.request(encodeRequest({ [method]: msg }), { timeoutMs, signal });
    } catch (e) {
      if (!(e instanceof SpError)) throw e;
      if (e.kind === "aborted") throw new Cancelled(Code.CANCELLED, `${method} aborted`);
      if (e.kind === "timeout") throw new TransportError(Code.DEADLINE_EXCEEDED, `${method}: ${e.message}`);
      throw new TransportError(Code.UNAVAILABLE, `${method}: ${e.message}`);
    }
    let resp;
    try {
      resp = decodeResponse(raw);
    } catch {
      throw new BerthError(Code.INTERNAL, "the answer is not a berth Response");
    }
    const err = fromStatus(resp.status);
    if (err !== null) throw err;
    if (resp.method !== method) throw new BerthError(Code.INTERNAL, `the answer to ${method} is not one`);
    return resp[method];
  }

  // ---- producers ----

  /** Hands a task to berth; resolves once it is on disk: { id, duplicate }. */
  async submit(topic, payload, opts = {}) {
    const r = await this.#call("submit", submitFields(topic, payload, opts));
    return { id: r.id, duplicate: r.duplicate ?? false };
  }

  /** items: [{ topic, payload, ...options }]; kept all or none. */
  async submitBatch(items) {
    const r = await this.#call("submitBatch", {
      items: items.map((i) => submitFields(i.topic, i.payload, i)),
    });
    return (r.items ?? []).map((x) => ({ id: x.id, duplicate: x.duplicate ?? false }));
  }

  /** Starts a call (a task whose outcome awaitCall() returns): { instanceId, duplicate }. */
  async call(topic, payload, opts = {}) {
    const m = submitFields(topic, payload, opts);
    if (opts.retry) m.retry = { ...opts.retry };
    const r = await this.#call("call", m);
    return { instanceId: r.instanceId, duplicate: r.duplicate ?? false };
  }

  /** The call's state once it has ended or waitMs has passed. */
  async awaitCall(instanceId, { waitMs, signal } = {}) {
    const m = { instanceId };
    if (waitMs !== undefined) m.waitMs = waitMs;
    const r = (await this.#call("awaitCall", m, { waitMs: waitMs ?? WAIT_MAX_MS, signal })).instance;
    const state = r.state ?? "STATE_UNSPECIFIED";
    return {
      id: r.id, state, attempt: r.attempt ?? 0, result: toResult(r.result),
      error: r.error ? { code: r.error.code ?? "", message: r.error.message ?? "", details: r.error.details ?? "" } : null,
      createdAtMs: r.createdAtMs ?? 0, resolvedAtMs: r.resolvedAtMs ?? null,
      done: state === "RESOLVED" || state === "FAILED",
    };
  }

  // ---- workers ----

  #guard(task) {
    return { taskId: task.id, workerId: task.workerId, lockToken: task.lockToken };
  }

  #completion(c) {
    const [task, result] = Array.isArray(c) ? c : [c, undefined];
    const m = this.#guard(task);
    const r = resultFields(result);
    if (r !== undefined) m.result = r;
    return m;
  }

  /**
   * Claims up to maxTasks tasks of the topics, waiting up to waitMs for one.
   * completes (tasks, or [task, result] pairs) are completed first, in the
   * same request; the array returned has completeErrors: one entry each,
   * null (kept) or the error it was answered with.
   */
  async fetch(topics, { maxTasks, lockMs, waitMs, workerId, completes = [], signal } = {}) {
    const wid = workerId ?? this.workerId;
    const m = { workerId: wid, topics: typeof topics === "string" ? [topics] : [...topics] };
    if (maxTasks !== undefined) m.maxTasks = maxTasks;
    if (lockMs !== undefined) m.lockMs = lockMs;
    if (waitMs !== undefined) m.waitMs = waitMs;
    if (completes.length > 0) m.completes = completes.map((c) => this.#completion(c));
    const r = await this.#call("fetch", m, { waitMs: waitMs ?? WAIT_MAX_MS, signal });
    const tasks = (r.tasks ?? []).map((t) => ({
      id: t.id, topic: t.topic, payload: t.payload ?? Buffer.alloc(0), headers: t.headers ?? {},
      contentType: t.contentType ?? null, instanceId: t.instanceId ?? null, attempt: t.attempt ?? 0,
      retriesLeft: t.retriesLeft ?? 0, lockToken: t.lockToken, lockExpiresAtMs: t.lockExpiresAtMs ?? 0,
      createdAtMs: t.createdAtMs ?? 0, priority: t.priority ?? 0, availableAtMs: t.availableAtMs ?? 0,
      workerId: wid,
    }));
    tasks.completeErrors = (r.completeStatuses ?? []).map(fromStatus);
    return tasks;
  }

  /** Completes a task this worker holds (result: a call's answer). */
  async complete(task, result) {
    await this.#call("complete", this.#completion([task, result]));
  }

  /** One entry per item, in order: null (kept) or the error (not thrown). */
  async completeBatch(items) {
    const r = await this.#call("completeBatch", { items: items.map((c) => this.#completion(c)) });
    return (r.statuses ?? []).map(fromStatus);
  }

  /** Reports a failed attempt ({ code, message, details }): retried after its
   * backoff unless the failure budget is spent (then terminal). */
  async fail(task, error, { retryInMs, retriesLeft } = {}) {
    const m = { ...this.#guard(task), error: errorFields(error) };
    if (retryInMs !== undefined) m.retryInMs = retryInMs;
    if (retriesLeft !== undefined) m.retriesLeft = retriesLeft;
    const r = await this.#call("fail", m);
    return { terminal: r.terminal ?? false, retriesLeft: r.retriesLeft ?? 0, availableAtMs: r.availableAtMs ?? null };
  }

  /** Ends the task for good: it cannot be done (a call resolves with the error). */
  async refuse(task, error) {
    await this.#call("refuse", { ...this.#guard(task), error: errorFields(error) });
  }

  /** Keeps the task locked lockMs from now; returns (and sets on task) the new expiry. */
  async extendLock(task, lockMs) {
    const m = this.#guard(task);
    if (lockMs !== undefined) m.lockMs = lockMs;
    const r = await this.#call("extendLock", m);
    task.lockExpiresAtMs = r.lockExpiresAtMs;
    return r.lockExpiresAtMs;
  }

  /** Gives the task back: fetchable again at once, no failure counted. */
  async release(task) {
    await this.#call("release", this.#guard(task));
  }

  /** A Worker on topics (see worker.js): an async iterable of tasks, or run(handler). */
  worker(topics, opts) {
    return new Worker(this, topics, opts);
  }
}

// Types of berth-client (src/index.js).

export type Bytes = string | Uint8Array;

export interface SubmitOptions {
  headers?: Record<string, string>;
  contentType?: string;
  idempotencyKey?: string;
  delayMs?: number;
  notBeforeMs?: number;
  priority?: number;
}
export interface SubmitItem extends SubmitOptions {
  topic: string;
  payload?: Bytes;
}
export interface Submitted {
  id: string;
  /** the idempotency key matched an earlier submit: id is that one's */
  duplicate: boolean;
}
export interface RetryPolicy {
  timeoutMs?: number;
  maxAttempts?: number;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  multiplier?: number;
  nonRetryableCodes?: string[];
}
export interface CallOptions extends SubmitOptions {
  retry?: RetryPolicy;
}
export interface Called {
  instanceId: string;
  duplicate: boolean;
}
export interface ResultIn {
  payload?: Bytes;
  contentType?: string;
  headers?: Record<string, string>;
}
export interface Result {
  payload: Buffer;
  contentType: string | null;
  headers: Record<string, string>;
}
export interface TaskError {
  code: string;
  message?: string;
  details?: string;
}
export interface Instance {
  id: string;
  state: "WAITING" | "BACKOFF" | "RESOLVED" | "FAILED" | "STATE_UNSPECIFIED";
  attempt: number;
  result: Result | null;
  error: Required<TaskError> | null;
  createdAtMs: number;
  resolvedAtMs: number | null;
  done: boolean;
}
export interface Task {
  id: string;
  topic: string;
  payload: Buffer;
  headers: Record<string, string>;
  contentType: string | null;
  /** set for a call's task */
  instanceId: string | null;
  attempt: number;
  retriesLeft: number;
  lockToken: string;
  lockExpiresAtMs: number;
  createdAtMs: number;
  priority: number;
  availableAtMs: number;
  workerId: string;
}
export type Completion = Task | [Task, (ResultIn | Bytes)?];
export interface Fetched extends Array<Task> {
  /** one per completion carried, in order: null (kept) or the error */
  completeErrors: (BerthError | null)[];
}
export interface FetchOptions {
  maxTasks?: number;
  lockMs?: number;
  waitMs?: number;
  workerId?: string;
  completes?: Completion[];
  signal?: AbortSignal;
}
export interface Failed {
  terminal: boolean;
  retriesLeft: number;
  availableAtMs: number | null;
}

export declare const WAIT_MAX_MS: number;

export declare class Client {
  constructor(url: string, opts?: { timeoutMs?: number; workerId?: string; recvMax?: number });
  readonly url: string;
  timeoutMs: number;
  workerId: string;
  close(): void;
  submit(topic: string, payload?: Bytes, opts?: SubmitOptions): Promise<Submitted>;
  submitBatch(items: SubmitItem[]): Promise<Submitted[]>;
  call(topic: string, payload?: Bytes, opts?: CallOptions): Promise<Called>;
  awaitCall(instanceId: string, opts?: { waitMs?: number; signal?: AbortSignal }): Promise<Instance>;
  fetch(topics: string | string[], opts?: FetchOptions): Promise<Fetched>;
  complete(task: Task, result?: ResultIn | Bytes): Promise<void>;
  completeBatch(items: Completion[]): Promise<(BerthError | null)[]>;
  fail(task: Task, error: TaskError, opts?: { retryInMs?: number; retriesLeft?: number }): Promise<Failed>;
  refuse(task: Task, error: TaskError): Promise<void>;
  extendLock(task: Task, lockMs?: number): Promise<number>;
  release(task: Task): Promise<void>;
  worker(topics: string | string[], opts?: WorkerOptions): Worker;
}

export interface WorkerOptions {
  maxTasks?: number;
  lockMs?: number;
  waitMs?: number;
  signal?: AbortSignal;
  retryPauseMs?: number;
  onCompletionError?: (task: Task, err: BerthError) => void;
}
/** A task the worker handed out: a Task, and how to answer it. */
export interface WorkerTask extends Task {}
export declare class WorkerTask {
  /** carried on the worker's next fetch */
  complete(result?: ResultIn | Bytes): void;
  fail(error: unknown, opts?: { retryInMs?: number; retriesLeft?: number }): Promise<Failed>;
  refuse(code: string, message?: string, details?: string): Promise<void>;
  extendLock(lockMs?: number): Promise<number>;
  release(): Promise<void>;
}
export declare class Worker implements AsyncIterable<WorkerTask> {
  constructor(client: Client, topics: string | string[], opts?: WorkerOptions);
  stop(): void;
  run(handler: (task: WorkerTask) => unknown | Promise<unknown>): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<WorkerTask>;
}
export declare class Refuse extends Error {
  constructor(code: string, message?: string, details?: string);
  code: string;
  details: string;
}
export declare function errorOf(e: unknown): Required<TaskError>;

export declare const Code: Readonly<Record<
  "OK" | "CANCELLED" | "UNKNOWN" | "INVALID_ARGUMENT" | "DEADLINE_EXCEEDED" | "NOT_FOUND" |
  "ALREADY_EXISTS" | "PERMISSION_DENIED" | "RESOURCE_EXHAUSTED" | "FAILED_PRECONDITION" |
  "ABORTED" | "OUT_OF_RANGE" | "UNIMPLEMENTED" | "INTERNAL" | "UNAVAILABLE" | "DATA_LOSS" |
  "UNAUTHENTICATED", number>>;
export declare class BerthError extends Error {
  constructor(code: number, message?: string, opts?: {
    verdict?: string; engineCode?: string; retryable?: boolean; field?: string; limit?: number;
  });
  code: number;
  codeName: string;
  statusMessage: string;
  verdict?: "LOCK_LOST" | "LOCK_HELD" | "TERMINAL" | "NOT_FOUND";
  engineCode?: string;
  retryable?: boolean;
  field?: string;
  limit?: number;
}
export declare class TransportError extends BerthError {}
export declare class Cancelled extends BerthError {}
export declare class InvalidArgument extends BerthError {}
export declare class NotFound extends BerthError {}
export declare class PermissionDenied extends BerthError {}
export declare class ResourceExhausted extends BerthError {}
export declare class FailedPrecondition extends BerthError {}
export declare class Aborted extends BerthError {}
export declare class Unimplemented extends BerthError {}
export declare class Internal extends BerthError {}
export declare class Unavailable extends BerthError {}
export declare class Unauthenticated extends BerthError {}
export declare class LockLost extends Aborted {}
export declare class LockHeld extends Aborted {}
export declare class Terminal extends FailedPrecondition {}
export declare function fromStatus(status: object | undefined): BerthError | null;

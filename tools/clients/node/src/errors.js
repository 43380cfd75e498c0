// berth's answers that are not OK, as errors. Each carries what berthd's
// Status said: code (gRPC's numbering) and codeName, message, verdict (what
// a worker must do with a task it held), engineCode and retryable (a
// refusal by the engine), field and limit (a bound that was passed). A
// verdict names the class when there is one (LockLost, LockHeld, Terminal,
// NotFound); otherwise the code does (InvalidArgument...).

export const Code = Object.freeze({
  OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5,
  ALREADY_EXISTS: 6, PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9,
  ABORTED: 10, OUT_OF_RANGE: 11, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14,
  DATA_LOSS: 15, UNAUTHENTICATED: 16,
});
const CODE_NAMES = Object.fromEntries(Object.entries(Code).map(([k, v]) => [v, k]));

export class BerthError extends Error {
  constructor(code, message = "", { verdict, engineCode, retryable, field, limit } = {}) {
    const name = CODE_NAMES[code] ?? String(code);
    const extra = Object.entries({ verdict, engineCode, field, limit })
      .filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${v}`);
    super(`${name}${message ? `: ${message}` : ""}${extra.length ? ` (${extra.join(", ")})` : ""}`);
    this.name = new.target.name;
    this.code = code;
    this.codeName = name;
    this.statusMessage = message;
    this.verdict = verdict;
    this.engineCode = engineCode;
    this.retryable = retryable;
    this.field = field;
    this.limit = limit;
  }
}

/** berthd could not be reached or did not answer in time (a request that
 * timed out may still have been done). */
export class TransportError extends BerthError {}
/** The caller's AbortSignal ended the request. */
export class Cancelled extends BerthError {}
export class InvalidArgument extends BerthError {}
/** No such task, call or deployment (or the verdict NOT_FOUND: the task is gone). */
export class NotFound extends BerthError {}
export class PermissionDenied extends BerthError {}
export class ResourceExhausted extends BerthError {}
export class FailedPrecondition extends BerthError {}
export class Aborted extends BerthError {}
export class Unimplemented extends BerthError {}
export class Internal extends BerthError {}
export class Unavailable extends BerthError {}
export class Unauthenticated extends BerthError {}
/** The lock expired or was released; the task is fetchable again: never complete it again. */
export class LockLost extends Aborted {}
/** Another claim holds the task: it is not yours. */
export class LockHeld extends Aborted {}
/** The task's failure budget is spent: stop for good. */
export class Terminal extends FailedPrecondition {}

const BY_CODE = {
  [Code.CANCELLED]: Cancelled, [Code.INVALID_ARGUMENT]: InvalidArgument,
  [Code.NOT_FOUND]: NotFound, [Code.PERMISSION_DENIED]: PermissionDenied,
  [Code.RESOURCE_EXHAUSTED]: ResourceExhausted, [Code.FAILED_PRECONDITION]: FailedPrecondition,
  [Code.ABORTED]: Aborted, [Code.UNIMPLEMENTED]: Unimplemented, [Code.INTERNAL]: Internal,
  [Code.UNAVAILABLE]: Unavailable, [Code.UNAUTHENTICATED]: Unauthenticated,
};
const BY_VERDICT = { LOCK_LOST: LockLost, LOCK_HELD: LockHeld, TERMINAL: Terminal, NOT_FOUND: NotFound };

/** The error a Status (as a plain object: enums as names) stands for, or null when OK. */
export function fromStatus(st) {
  const code = st?.code === undefined ? 0 : typeof st.code === "string" ? Code[st.code] : st.code;
  if (code === Code.OK) return null;
  const verdict = st.verdict && st.verdict !== "NO_VERDICT" ? st.verdict : undefined;
  const Cls = BY_VERDICT[verdict] ?? BY_CODE[code] ?? BerthError;
  return new Cls(code, st.message ?? "", {
    verdict, engineCode: st.engineCode, retryable: st.retryable, field: st.field, limit: st.limit,
  });
}

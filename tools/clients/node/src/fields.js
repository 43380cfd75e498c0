// What a caller gives, as the wire's message fields: bytes (a payload from
// a string, bytes or nothing) and resultFields (a completion's result,
// checked). Imported by client.js, which builds its requests with them, and
// by worker.js, whose task.complete() checks a result where it is given;
// it imports neither of them.

export const bytes = (b) => (b === undefined || b === null ? Buffer.alloc(0)
  : typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b));

/** A completion's result as the wire has it: undefined (none), a string or
 * bytes (the payload), or { payload, contentType, headers }. Anything else
 * is a TypeError, thrown where the result is given. */
export function resultFields(r) {
  if (r === undefined || r === null) return undefined;
  if (typeof r === "string" || r instanceof Uint8Array) return { payload: bytes(r) };
  const known = ["payload", "contentType", "headers"];
  if (typeof r !== "object" || Array.isArray(r) || Object.keys(r).some((k) => !known.includes(k)) ||
      !(r.payload === undefined || typeof r.payload === "string" || r.payload instanceof Uint8Array)) {
    throw new TypeError("berth-client: a result is a string, bytes, or { payload, contentType, headers }");
  }
  const m = { payload: bytes(r.payload) };
  if (r.contentType !== undefined) m.contentType = r.contentType;
  if (r.headers) m.headers = { ...r.headers };
  return m;
}

// SP's REQ protocol over a stream socket, as nng speaks it (ARCHITECTURE.md, "Wire",
// "SP over TCP"): each side first sends 8 bytes, 00 53 50 00, its
// protocol (REQ 0x0030, REP 0x0031, big endian), 00 00; then every message
// is a 64-bit big-endian length and that many bytes. A request begins with
// a 32-bit id with its high bit set; the answer begins with the same id.
// Over ipc:// (nng's IPC transport) each message's length is preceded by
// a byte holding 1, the message type.
// Requests are pipelined on one connection and matched to answers by id,
// so they may be answered in any order. A connection that fails fails the
// requests on it; the next request dials again. An idle connection does
// not keep the process alive (a script that forgets close() still ends).

import net from "node:net";

const HELLO_REQ = Buffer.from([0x00, 0x53, 0x50, 0x00, 0x00, 0x30, 0x00, 0x00]);
const HELLO_REP = Buffer.from([0x00, 0x53, 0x50, 0x00, 0x00, 0x31]);

/** tcp://host:port, tcp://[v6]:port or ipc:///path → net.connect's options. */
export function parseUrl(url) {
  if (url.startsWith("ipc://")) return { path: url.slice(6) };
  const m = /^tcp:\/\/(?:\[([^\]]+)\]|([^:/]*)):(\d+)$/.exec(url);
  if (m === null) throw new TypeError(`${url}: berth-client speaks tcp://host:port and ipc:///path`);
  return { host: m[1] ?? (m[2] || "127.0.0.1"), port: Number(m[3]) };
}

export class SpError extends Error {
  /** kind: "unreachable" | "timeout" | "aborted" | "closed" | "protocol" */
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

export class ReqConnection {
  #url;
  #target;
  #recvMax;
  #connectTimeoutMs;
  #lead; // bytes before a message's length: 1 over ipc://, else 0
  #sock = null;
  #ready = null; // a promise: the handshake done on #sock
  #pending = new Map(); // id → { resolve, reject, cleanup }
  #nextId = Math.floor(Math.random() * 0x7fffffff);
  #in = [];
  #inLen = 0;
  #closed = false;

  constructor(url, { recvMax = 64 * 1024 * 1024, connectTimeoutMs = 10_000 } = {}) {
    this.#url = url;
    this.#target = parseUrl(url);
    this.#lead = this.#target.path !== undefined ? 1 : 0;
    this.#recvMax = recvMax;
    this.#connectTimeoutMs = connectTimeoutMs;
  }

  /** Sends body; resolves with the answer's body (the id taken off). */
  async request(body, { timeoutMs = 10_000, signal } = {}) {
    if (this.#closed) throw new SpError("closed", "the client is closed");
    const aborted = () => new SpError("aborted", "aborted");
    if (signal?.aborted) throw aborted();
    const started = Date.now();
    // The dial and handshake, bounded by the timeout and the signal too.
    let stop;
    const stopped = new Promise((_resolve, reject) => {
      const t = setTimeout(() => reject(new SpError("timeout", `no connection within ${timeoutMs} ms`)), timeoutMs);
      const onAbort = () => reject(aborted());
      signal?.addEventListener("abort", onAbort, { once: true });
      stop = () => {
        clearTimeout(t);
        signal?.removeEventListener("abort", onAbort);
      };
    });
    try {
      await Promise.race([this.#connect(), stopped]);
    } finally {
      stop(); // (so `stopped` never settles after the race)
    }
    if (signal?.aborted) throw aborted();
    const sock = this.#sock;
    if (sock === null) throw new SpError("unreachable", `${this.#url}: connection lost`);
    const id = ((this.#nextId = (this.#nextId + 1) & 0x7fffffff) | 0x80000000) >>> 0;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        cleanup();
        reject(new SpError("timeout", `no answer within ${timeoutMs} ms (it may have been done)`));
      }, Math.max(timeoutMs - (Date.now() - started), 1));
      const onAbort = () => {
        this.#pending.delete(id);
        cleanup();
        reject(new SpError("aborted", "aborted"));
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (this.#pending.size === 0) this.#sock?.unref();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#pending.set(id, { resolve, reject, cleanup });
      sock.ref();
      const lead = this.#lead;
      const head = Buffer.alloc(lead + 12);
      if (lead > 0) head[0] = 1;
      head.writeBigUInt64BE(BigInt(body.length + 4), lead);
      head.writeUInt32BE(id, lead + 8);
      sock.write(Buffer.concat([head, body]));
    });
  }

  close() {
    this.#closed = true;
    this.#fail(new SpError("closed", "the client is closed"));
  }

  #connect() {
    if (this.#ready !== null) return this.#ready;
    const sock = net.connect(this.#target);
    sock.setNoDelay(true);
    this.#sock = sock;
    this.#in = [];
    this.#inLen = 0;
    this.#ready = new Promise((resolve, reject) => {
      let hello = Buffer.alloc(0);
      const timer = setTimeout(() => {
        sock.destroy(new SpError("unreachable", `${this.#url}: no handshake within ${this.#connectTimeoutMs} ms`));
      }, this.#connectTimeoutMs);
      const onData = (chunk) => {
        if (hello !== null) {
          hello = Buffer.concat([hello, chunk]);
          if (hello.length < 8) return;
          clearTimeout(timer);
          if (!hello.subarray(0, 6).equals(HELLO_REP)) {
            sock.destroy(new SpError("protocol", `${this.#url}: not an SP REP peer`));
            return;
          }
          const rest = hello.subarray(8);
          hello = null;
          resolve();
          if (rest.length > 0) this.#onData(rest);
          return;
        }
        this.#onData(chunk);
      };
      sock.on("connect", () => sock.write(HELLO_REQ));
      sock.on("data", onData);
      sock.on("error", () => {}); // "close" follows and says it
      sock.on("close", () => {
        clearTimeout(timer);
        if (this.#sock === sock) {
          this.#sock = null;
          this.#ready = null;
          this.#fail(new SpError("unreachable", `${this.#url}: connection lost`));
        }
        reject(new SpError("unreachable", `${this.#url}: cannot connect`));
      });
    });
    this.#ready.catch(() => {}); // (each caller sees it through await)
    return this.#ready;
  }

  #onData(chunk) {
    this.#in.push(chunk);
    this.#inLen += chunk.length;
    const lead = this.#lead;
    for (;;) {
      if (this.#inLen < lead + 8) return;
      if (this.#in[0].length < lead + 8) this.#in = [Buffer.concat(this.#in)];
      const first = this.#in[0];
      const len = first.readBigUInt64BE(lead);
      if ((lead > 0 && first[0] !== 1) || len < 4n || len > BigInt(this.#recvMax) + 4n) {
        this.#sock?.destroy(new SpError("protocol", `${this.#url}: a frame of ${len} bytes`));
        return;
      }
      const end = lead + 8 + Number(len);
      // The chunks are joined once, when the whole frame is in.
      if (this.#inLen < end) return;
      const buf = this.#in.length === 1 ? first : Buffer.concat(this.#in);
      const id = buf.readUInt32BE(lead + 8);
      const body = Buffer.from(buf.subarray(lead + 12, end));
      const rest = buf.subarray(end);
      this.#in = rest.length > 0 ? [rest] : [];
      this.#inLen = rest.length;
      const p = this.#pending.get(id);
      if (p !== undefined) {
        this.#pending.delete(id);
        p.cleanup();
        p.resolve(body);
      } // else: the answer to a request that timed out or was aborted
    }
  }

  #fail(err) {
    const pending = this.#pending;
    this.#pending = new Map();
    for (const p of pending.values()) {
      p.cleanup();
      p.reject(err);
    }
    if (this.#closed && this.#sock !== null) {
      const s = this.#sock;
      this.#sock = null;
      this.#ready = null;
      s.destroy();
    }
  }
}

// berth-client: berth's operate surface for Node, over nng's REQ protocol
// written here on node:net (tcp:// and ipc://), messages from the .proto
// files through protobufjs.
export { Client, WAIT_MAX_MS } from "./client.js";
export { Worker, WorkerTask, Refuse, errorOf } from "./worker.js";
export * from "./errors.js";

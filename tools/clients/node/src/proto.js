// The message classes of proto/berth/v1, loaded from the .proto files by
// protobufjs: the package's proto/ (copied in when it is packed), else the
// checkout's.

import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import protobuf from "protobufjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const candidates = [
  process.env.BERTH_PROTO_DIR,
  path.join(here, "..", "proto"),
  path.join(here, "..", "..", "..", "..", "proto"),
].filter(Boolean);
export const protoDir = candidates.find((d) => existsSync(path.join(d, "berth/v1/operate.proto")));
if (protoDir === undefined) {
  throw new Error("berth-client: proto/berth/v1 not found (set BERTH_PROTO_DIR)");
}

const root = new protobuf.Root();
root.resolvePath = (_origin, target) => path.join(protoDir, target);
root.loadSync(["berth/v1/operate.proto"], { keepCase: false });

export const Request = root.lookupType("berth.v1.Request");
export const Response = root.lookupType("berth.v1.Response");

/** Encodes a Request from a plain object ({ submit: {...} }). */
export function encodeRequest(obj) {
  const err = Request.verify(obj);
  if (err) throw new TypeError(`berth-client: ${err}`);
  return Buffer.from(Request.encode(Request.fromObject(obj)).finish());
}

/** Decodes a Response into a plain object: enums as names, 64-bit numbers
 * as Numbers, bytes as Buffers, absent fields absent. */
export function decodeResponse(buf) {
  return Response.toObject(Response.decode(buf), { enums: String, longs: Number, oneofs: true });
}

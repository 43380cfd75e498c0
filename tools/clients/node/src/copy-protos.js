// npm pack: the package carries its own copy of proto/berth/v1.
import { cpSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const from = path.join(here, "..", "..", "..", "..", "proto", "berth", "v1");
const to = path.join(here, "..", "proto", "berth", "v1");
mkdirSync(to, { recursive: true });
for (const f of ["operate.proto", "admin.proto", "push.proto"]) cpSync(path.join(from, f), path.join(to, f));

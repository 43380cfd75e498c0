// A real berthd for the browser tests: a temp directory, free ports,
// stopped after; and the CLI (build/berth) pointed at it. BERTHD and
// BERTH name the binaries (default: the checkout's build/).
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const build = path.join(here, "..", "..", "build");
const berthd = process.env.BERTHD ?? path.join(build, "berthd");
const berth = process.env.BERTH ?? path.join(build, "berth");
const run = promisify(execFile);

// A key file of `key` in a temp directory (removed with the berthd).
export function keyFile(dir, key) {
  const f = path.join(dir, "admin.key");
  writeFileSync(f, key + "\n", { mode: 0o600 });
  return f;
}

export async function startBerthd({ key = null, args = [] } = {}) {
  for (const b of [berthd, berth])
    if (!existsSync(b)) throw new Error(`no ${b} (build it, or set BERTHD and BERTH)`);
  const dir = mkdtempSync(path.join(os.tmpdir(), "berth-console-"));
  const keyArgs = key === null ? [] : ["--admin-key-file", keyFile(dir, key)];
  const argv = ["--data", path.join(dir, "data"), "--operate", "tcp://127.0.0.1:0",
    "--events", "tcp://127.0.0.1:0", "--admin", "tcp://127.0.0.1:0",
    "--metrics", "http://127.0.0.1:0", ...keyArgs, ...args];
  const proc = spawn(berthd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const urls = await new Promise((resolve, reject) => {
    let line = "";
    const timer = setTimeout(() => reject(new Error(`berthd did not start: ${line} ${stderr}`)), 20_000);
    proc.stdout.on("data", (d) => {
      line += d;
      if (!line.includes("\n")) return;
      const get = (k) => new RegExp(`${k}=(\\S+)`).exec(line)?.[1];
      clearTimeout(timer);
      resolve({ operate: get("operate"), admin: get("admin"), metrics: get("metrics") });
    });
    proc.on("exit", (code) => reject(new Error(`berthd exited (${code}): ${line} ${stderr}`)));
  });
  const keyPath = key === null ? null : path.join(dir, "admin.key");
  return {
    ...urls,
    dir,
    stderr: () => stderr,
    // The CLI with --json, against this berthd; its parsed output.
    async cli(...words) {
      const auth = keyPath ? ["--admin-key-file", keyPath] : [];
      const { stdout } = await run(berth, ["--operate", urls.operate, "--admin", urls.admin,
        ...auth, "--json", ...words], { maxBuffer: 16 << 20 });
      const lines = stdout.trim().split("\n").filter(Boolean);
      return lines.length === 1 ? JSON.parse(lines[0]) : lines.map((l) => JSON.parse(l));
    },
    async stop() {
      if (proc.exitCode === null) {
        const gone = new Promise((r) => proc.on("exit", (_code, sig) => r(sig)));
        proc.kill("SIGTERM");
        const late = setTimeout(() => proc.kill("SIGKILL"), 15_000);
        const signal = await gone;
        clearTimeout(late);
        if (signal === "SIGKILL") throw new Error("berthd did not stop within 15 s of SIGTERM");
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

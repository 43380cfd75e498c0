// A real berthd for the tests: a temp directory, free ports, stopped after.
// BERTHD names the binary (default: the checkout's build/berthd).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const binary = process.env.BERTHD ?? path.join(here, "..", "..", "..", "..", "build", "berthd");

export async function startBerthd(...extra) {
  if (!existsSync(binary)) throw new Error(`no berthd at ${binary} (build it, or set BERTHD)`);
  const dir = mkdtempSync(path.join(os.tmpdir(), "berth-node-"));
  const args = ["--data", dir, "--operate", "tcp://127.0.0.1:0", "--events", "tcp://127.0.0.1:0",
    "--admin", "tcp://127.0.0.1:0", "--metrics", "http://127.0.0.1:0", ...extra];
  const proc = spawn(binary, args, { stdio: ["ignore", "pipe", "ignore"] });
  const operate = await new Promise((resolve, reject) => {
    let line = "";
    const timer = setTimeout(() => reject(new Error(`berthd did not start: ${line}`)), 20_000);
    proc.stdout.on("data", (d) => {
      line += d;
      const m = /operate=(\S+)/.exec(line);
      if (line.includes("\n") && m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on("exit", (code) => reject(new Error(`berthd exited (${code}): ${line}`)));
  });
  return {
    operate,
    async stop() {
      if (proc.exitCode === null) {
        const gone = new Promise((r) => proc.on("exit", (_code, sig) => r(sig)));
        proc.kill("SIGTERM");
        // Shutdown is bounded; a berthd that outlives 15 s is killed (and the
        // test fails), never left behind.
        const late = setTimeout(() => proc.kill("SIGKILL"), 15_000);
        const signal = await gone;
        clearTimeout(late);
        if (signal === "SIGKILL") throw new Error("berthd did not stop within 15 s of SIGTERM");
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

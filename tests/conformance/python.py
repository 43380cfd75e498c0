"""The conformance suite's driver for the Python client (tools/clients/python).

    python3 tests/conformance/python.py OPERATE_URL [scenarios.json]

Runs every scenario against the berthd at OPERATE_URL; prints one line per
scenario and exits non-zero if any failed. See scenarios.json for the
format and the results each step must produce.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Dict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools" / "clients" / "python"))

import berth  # noqa: E402
from berth import Client, Result, RetryPolicy, Submit, TaskError, Worker  # noqa: E402


class Native:
    """A result's value that steps pass back to the client as it was."""

    def __init__(self, obj: Any, shown: Dict[str, Any]):
        self.obj, self.shown = obj, shown


def text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def show_error(e: berth.BerthError) -> Dict[str, Any]:
    return {"code": e.code_name, "verdict": e.verdict, "field": e.field, "limit": e.limit,
            "message": e.message}


def show_task(t: berth.Task) -> Native:
    return Native(t, {"id": t.id, "topic": t.topic, "payload": text(t.payload),
                      "headers": t.headers, "content_type": t.content_type,
                      "instance_id": t.instance_id, "attempt": t.attempt,
                      "retries_left": t.retries_left, "priority": t.priority})


def plain(v: Any) -> Any:
    """A result with the client's objects shown as the suite sees them."""
    if isinstance(v, Native):
        return plain(v.shown)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def lookup(v: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        if isinstance(v, Native):
            v = v.shown
        if part == "#":
            return len(v)
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


class Run:
    def __init__(self, client: Client):
        self.c = client
        self.vars: Dict[str, Any] = {}

    def arg(self, v: Any) -> Any:
        if isinstance(v, str) and v.startswith("$"):
            name, _, path = v[1:].partition(".")
            got = lookup(self.vars[name], path)
            return got.obj if isinstance(got, Native) else got
        if isinstance(v, dict):
            return {k: self.arg(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.arg(x) for x in v]
        return v

    @staticmethod
    def result(r: Any) -> Any:
        if r is None or isinstance(r, str):
            return r
        return Result(r.get("payload", "").encode(), r.get("content_type"), r.get("headers", {}))

    @staticmethod
    def error(e: Dict[str, str]) -> TaskError:
        return TaskError(e["code"], e.get("message", ""), e.get("details", ""))

    def do(self, s: Dict[str, Any]) -> Dict[str, Any]:
        c, op = self.c, s["do"]
        if op == "sleep":
            time.sleep(s["ms"] / 1000)
            return {}
        if op == "submit":
            r = c.submit(s["topic"], s.get("payload", ""), headers=s.get("headers"),
                         content_type=s.get("content_type"),
                         idempotency_key=s.get("idempotency_key"), delay_ms=s.get("delay_ms"),
                         not_before_ms=s.get("not_before_ms"), priority=s.get("priority"))
            return {"id": r.id, "duplicate": r.duplicate}
        if op == "submit_batch":
            r = c.submit_batch([Submit(**i) for i in s["items"]])
            return {"items": [{"id": x.id, "duplicate": x.duplicate} for x in r]}
        if op == "call":
            retry = RetryPolicy(**s["retry"]) if "retry" in s else None
            r = c.call(s["topic"], s.get("payload", ""), retry=retry)
            return {"instance_id": r.instance_id, "duplicate": r.duplicate}
        if op == "await_call":
            r = c.await_call(s["instance_id"], s.get("wait_ms"))
            return {"state": r.state, "attempt": r.attempt,
                    "result": None if r.result is None else {
                        "payload": text(r.result.payload), "content_type": r.result.content_type,
                        "headers": r.result.headers},
                    "error": None if r.error is None else {"code": r.error.code,
                                                           "message": r.error.message}}
        if op == "fetch":
            completes = [(x["task"], self.result(x.get("result"))) for x in s.get("completes", [])]
            r = c.fetch(s["topics"], max_tasks=s.get("max_tasks"), lock_ms=s.get("lock_ms"),
                        wait_ms=s.get("wait_ms"), worker_id=s.get("worker_id"),
                        completes=completes)
            return {"tasks": [show_task(t) for t in r],
                    "complete_errors": [None if e is None else show_error(e)
                                        for e in r.complete_errors]}
        if op == "complete":
            c.complete(s["task"], self.result(s.get("result")))
            return {}
        if op == "complete_batch":
            errs = c.complete_batch([(x["task"], self.result(x.get("result")))
                                     for x in s["items"]])
            return {"errors": [None if e is None else show_error(e) for e in errs]}
        if op == "fail":
            r = c.fail(s["task"], self.error(s["error"]), retry_in_ms=s.get("retry_in_ms"),
                       retries_left=s.get("retries_left"))
            return {"terminal": r.terminal, "retries_left": r.retries_left}
        if op == "refuse":
            c.refuse(s["task"], self.error(s["error"]))
            return {}
        if op == "extend_lock":
            return {"lock_expires_at_ms": c.extend_lock(s["task"], s.get("lock_ms"))}
        if op == "release":
            c.release(s["task"])
            return {}
        if op == "worker_loop":
            return self.worker_loop(s["topic"], s["count"], s["lock_ms"])
        raise ValueError(f"unknown step {op!r}")

    def worker_loop(self, topic: str, count: int, lock_ms: int) -> Dict[str, Any]:
        c = self.c
        for first in range(0, count, 100):
            c.submit_batch([Submit(topic, str(i)) for i in range(first, min(first + 100, count))])
        seen: Dict[bytes, int] = {}

        def handler(task):
            seen[task.payload] = seen.get(task.payload, 0) + 1
            if len(seen) == count:
                w.stop()

        w = Worker(c, topic, handler, max_tasks=50, wait_ms=500, lock_ms=lock_ms)
        th = threading.Thread(target=w.run, kwargs={"handle_signals": False})
        th.start()
        th.join(120)
        if th.is_alive():
            w.stop()
            th.join()
        time.sleep(lock_ms / 1000 + 0.3)  # a task whose completion was lost is fetchable again
        left = len(c.fetch(topic, max_tasks=1000, wait_ms=0))
        return {"handled": sum(seen.values()), "distinct": len(seen), "left": left}

    def step(self, s: Dict[str, Any]) -> None:
        args = {k: self.arg(v) for k, v in s.items() if k not in ("expect", "as")}
        try:
            got: Any = self.do(args)
        except berth.BerthError as e:
            got = {"refused": show_error(e)}
        if "as" in s:
            self.vars[s["as"]] = got
        expect = s.get("expect", {})
        if "refused" in got and not any(k.startswith("refused.") for k in expect):
            raise AssertionError(f"{s['do']}: refused: {got['refused']}")
        for path, want in expect.items():
            want = self.arg(want)
            have = plain(lookup(got, path))
            if have != want:
                raise AssertionError(f"{s['do']}: {path} is {have!r}, not {want!r}")


def main() -> int:
    url = sys.argv[1]
    suite = json.loads(Path(sys.argv[2] if len(sys.argv) > 2 else HERE / "scenarios.json")
                       .read_text())
    failed = 0
    with Client(url, worker_id="conformance-python") as client:
        for sc in suite["scenarios"]:
            run = Run(client)
            run.vars["T"] = "conf-py-" + uuid.uuid4().hex[:12]
            try:
                for s in sc["steps"]:
                    run.step(s)
                print(f"ok      {sc['name']}")
            except Exception as e:  # a scenario's failure is reported, the rest run
                failed += 1
                print(f"FAILED  {sc['name']}: {e}")
                if not isinstance(e, AssertionError):
                    traceback.print_exc()
    print(f"python: {len(suite['scenarios']) - failed} of {len(suite['scenarios'])} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The Python client against a real berthd: every method, every verdict,
bounds, calls, and the Worker helper."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import berth
from berth import (Client, InvalidArgument, LockHeld, LockLost, NotFound, Refuse, Result,
                   RetryPolicy, Submit, TaskError, Terminal, TransportError, Worker)


def topic() -> str:
    return "py-" + uuid.uuid4().hex[:12]


def fetch_one(c: Client, t: str, **kw) -> berth.Task:
    got = c.fetch(t, max_tasks=1, wait_ms=2000, **kw)
    assert len(got) == 1, got
    return got[0]


def test_submit_fetch_complete_round_trip(client):
    t = topic()
    s = client.submit(t, b"hello", headers={"k": "v"}, content_type="text/plain")
    assert len(s.id) == 32 and not s.duplicate
    task = fetch_one(client, t, lock_ms=5000)
    assert (task.id, task.topic, task.payload) == (s.id, t, b"hello")
    assert task.headers == {"k": "v"} and task.content_type == "text/plain"
    assert task.attempt == 1 and task.worker_id == "py-test" and task.lock_token
    assert task.lock_expires_at_ms > time.time() * 1000
    client.complete(task)
    # Gone: a repeat is NOT_FOUND, and nothing is left to fetch.
    with pytest.raises(NotFound) as e:
        client.complete(task)
    assert e.value.verdict == "NOT_FOUND"
    assert list(client.fetch(t, wait_ms=0)) == []


def test_str_payloads_are_utf8_and_bytes_stay_bytes(client):
    t = topic()
    client.submit(t, "grüße")
    client.submit(t, b"\x00\xff")
    got = client.fetch(t, max_tasks=2, wait_ms=2000)
    assert sorted(x.payload for x in got) == sorted(["grüße".encode(), b"\x00\xff"])
    assert client.complete_batch(got) == [None, None]


def test_idempotency_key_returns_the_first_id(client):
    t = topic()
    a = client.submit(t, b"1", idempotency_key="order-7")
    b = client.submit(t, b"2", idempotency_key="order-7")
    assert b.duplicate and b.id == a.id
    assert len(client.fetch(t, max_tasks=10, wait_ms=0)) == 1


def test_submit_batch_in_order(client):
    t = topic()
    r = client.submit_batch([Submit(t, b"a"), Submit(t, b"b", priority=0), Submit(t, "c")])
    assert len(r) == 3 and len({x.id for x in r}) == 3
    got = client.fetch(t, max_tasks=3, wait_ms=2000)
    assert got[0].payload == b"b"  # priority 0 first
    assert client.complete_batch(got) == [None] * 3


def test_bounds_are_invalid_argument_naming_the_field(client):
    with pytest.raises(InvalidArgument) as e:
        client.fetch(topic(), max_tasks=1_000_000, wait_ms=0)
    assert e.value.field == "max_tasks" and e.value.limit == 1000
    assert e.value.code == berth.errors.INVALID_ARGUMENT
    with pytest.raises(InvalidArgument) as e:
        client.submit("")
    assert e.value.field == "topic"
    with pytest.raises(InvalidArgument):
        client.submit(topic(), delay_ms=5, not_before_ms=5)


def test_lock_lost_after_expiry_and_lock_held_by_the_next_claim(client):
    t = topic()
    client.submit(t, b"x")
    first = fetch_one(client, t, lock_ms=100)
    time.sleep(0.3)
    second = fetch_one(client, t, lock_ms=5000, worker_id="other")
    assert second.id == first.id and second.attempt == 2
    with pytest.raises(LockHeld):
        client.complete(first)
    client.release(second)
    with pytest.raises(LockLost) as e:
        client.complete(second)
    assert e.value.verdict == "LOCK_LOST"
    client.complete(fetch_one(client, t))


def test_fail_retries_then_terminal(client):
    t = topic()
    client.submit(t, b"x")
    task = fetch_one(client, t)
    f = client.fail(task, TaskError("Boom", "it broke", "trace"))
    assert not f.terminal and f.retries_left == 1
    task = fetch_one(client, t)
    f = client.fail(task, TaskError("Boom", "again"), retries_left=0)
    assert f.terminal
    with pytest.raises(Terminal) as e:
        client.complete(task)
    assert e.value.verdict == "TERMINAL"


def test_refuse_ends_the_task(client):
    t = topic()
    client.submit(t, b"x")
    task = fetch_one(client, t)
    client.refuse(task, TaskError("Bad", "cannot be done"))
    with pytest.raises(NotFound):
        client.complete(task)


def test_extend_lock_moves_the_expiry(client):
    t = topic()
    client.submit(t, b"x")
    task = fetch_one(client, t, lock_ms=1000)
    before = task.lock_expires_at_ms
    after = client.extend_lock(task, 20_000)
    assert after >= before + 15_000 and task.lock_expires_at_ms == after
    client.complete(task)


def test_fused_fetch_completes_first(client):
    t = topic()
    client.submit_batch([Submit(t, b"1"), Submit(t, b"2")])
    a = fetch_one(client, t)
    got = client.fetch(t, max_tasks=5, wait_ms=2000, completes=[a])
    assert got.complete_errors == [None]
    assert [x.payload for x in got] != [a.payload] and len(got) == 1
    again = client.fetch(t, wait_ms=0, completes=[a, got[0]])
    assert isinstance(again.complete_errors[0], NotFound) and again.complete_errors[1] is None


def test_call_resolves_with_the_workers_result(client):
    t = topic()
    called = client.call(t, b"2+2", retry=RetryPolicy(timeout_ms=60_000, max_attempts=3))
    pending = client.await_call(called.instance_id, wait_ms=0)
    assert pending.state == "WAITING" and not pending.done
    task = fetch_one(client, t)
    assert task.instance_id == called.instance_id
    client.complete(task, Result(b"4", content_type="text/plain", headers={"h": "1"}))
    done = client.await_call(called.instance_id, wait_ms=5000)
    assert done.state == "RESOLVED" and done.done
    assert done.result == Result(b"4", "text/plain", {"h": "1"})


def test_await_unknown_call_is_not_found(client):
    with pytest.raises(NotFound):
        client.await_call("0" * 32, wait_ms=0)


def test_cancel_ends_a_waiting_fetch(client):
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(berth.Cancelled):
        client.fetch(topic(), wait_ms=20_000, cancel=stop)
    assert time.monotonic() - t0 < 5


def test_unreachable_is_a_transport_error():
    with pytest.raises(TransportError):
        Client("tcp://127.0.0.1:1")


def test_worker_completes_fails_and_refuses(berthd):
    t = topic()
    seen: dict = {}
    with Client(berthd.operate) as c:
        c.submit_batch([Submit(t, f"ok-{i}") for i in range(20)] +
                       [Submit(t, b"raise"), Submit(t, b"refuse")])
        call = c.call(t, b"answer me")

        def handler(task):
            seen[task.payload] = seen.get(task.payload, 0) + 1
            if task.payload == b"raise":
                raise ValueError("no good")
            if task.payload == b"refuse":
                raise Refuse("Unwanted", "never")
            if task.instance_id:
                return b"answered"
            return None

        w = Worker(c, t, handler, max_tasks=5, wait_ms=200)
        th = threading.Thread(target=w.run, kwargs={"handle_signals": False})
        th.start()
        deadline = time.time() + 20
        while time.time() < deadline and (seen.get(b"raise", 0) < 2 or len(seen) < 23):
            time.sleep(0.05)
        w.stop()
        th.join(10)
        assert not th.is_alive()
        assert all(seen[f"ok-{i}".encode()] == 1 for i in range(20))
        assert seen[b"refuse"] == 1
        assert seen[b"raise"] == 2  # the budget of 2 (--retries 2): then terminal
        assert c.await_call(call.instance_id, wait_ms=5000).result.payload == b"answered"
        assert list(c.fetch(t, wait_ms=0)) == []  # everything ended


def test_worker_extends_the_lock_of_a_slow_handler(berthd):
    t = topic()
    with Client(berthd.operate) as c:
        c.submit(t, b"slow")
        attempts = []

        def handler(task):
            attempts.append(task.attempt)
            time.sleep(3.5)  # three and a half times the lock
            w.stop()

        w = Worker(c, t, handler, lock_ms=1000, wait_ms=200)
        w.run(handle_signals=False)
        # Had the lock lapsed, a second fetch would have taken the task
        # again; it was completed once, on its first attempt.
        assert attempts == [1]
        assert list(c.fetch(t, wait_ms=0)) == []


def test_worker_stops_on_sigterm_and_completes_what_it_did(berthd, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    t = topic()
    with Client(berthd.operate) as c:
        c.submit_batch([Submit(t, f"t{i}") for i in range(5)])
        script = tmp_path / "worker.py"
        script.write_text(
            "import sys, berth\n"
            "c = berth.Client(sys.argv[1])\n"
            "def handle(task):\n"
            "    print(task.payload.decode(), flush=True)\n"
            "berth.Worker(c, sys.argv[2], handle, max_tasks=5, wait_ms=10000).run()\n"
            "print('stopped', flush=True)\n")
        env = dict(os.environ, PYTHONPATH=str(Path(berth.__file__).parent.parent))
        p = subprocess.Popen([sys.executable, str(script), berthd.operate, t], env=env,
                             stdout=subprocess.PIPE, text=True)
        handled = [p.stdout.readline().strip() for _ in range(5)]
        assert sorted(handled) == [f"t{i}" for i in range(5)]
        # Its fetch now waits (10 s) carrying the five completions: SIGTERM
        # ends the loop after that fetch, which has kept them.
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 0 and out.strip() == "stopped"
        assert list(c.fetch(t, max_tasks=10, wait_ms=0)) == []


def test_worker_fails_a_result_of_the_wrong_kind_and_goes_on(berthd):
    t = topic()
    with Client(berthd.operate) as c:
        c.submit_batch([Submit(t, b"dict"), Submit(t, b"fine")])
        seen = []

        def handler(task):
            seen.append(task.payload)
            if len(seen) == 2:
                w.stop()
            return {"not": "a result"} if task.payload == b"dict" else b"ok"

        w = Worker(c, t, handler, max_tasks=2, wait_ms=200)
        w.run(handle_signals=False)
        again = c.fetch(t, wait_ms=2000)  # the failed one, retried; the other completed
        assert [x.payload for x in again] == [b"dict"] and again[0].attempt == 2
        c.complete(again[0])


def test_worker_completes_one_at_a_time_when_together_they_are_too_big():
    from conftest import Berthd

    b = Berthd("--max-message-bytes", "65536", "--payload-max-bytes", "40000")
    try:
        t = topic()
        with Client(b.operate) as c:
            c.submit_batch([Submit(t, f"big-{i}") for i in range(8)])
            n = [0]

            def handler(task):
                n[0] += 1
                if n[0] == 8:
                    w.stop()
                return b"\x07" * 30_000  # four together are over the 64 KiB bound

            w = Worker(c, t, handler, max_tasks=4, wait_ms=200, lock_ms=1000)
            th = threading.Thread(target=w.run, kwargs={"handle_signals": False})
            th.start()
            th.join(30)
            assert not th.is_alive(), "the worker is stuck on its completions"
            time.sleep(1.3)  # past every lock: a completion not kept shows
            assert list(c.fetch(t, max_tasks=10, wait_ms=0)) == []
    finally:
        b.close()


"""A real berthd per test module: started on a temp directory and free ports,
stopped afterwards. BERTHD names the binary (default: the checkout's
build/berthd)."""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package, from the checkout

CHECKOUT = HERE.parents[3]


class Berthd:
    def __init__(self, *extra: str):
        binary = os.environ.get("BERTHD", str(CHECKOUT / "build" / "berthd"))
        if not Path(binary).exists():
            pytest.fail(f"no berthd at {binary} (build it, or set BERTHD)")
        self.dir = tempfile.mkdtemp(prefix="berth-py-")
        self.extra = extra
        self.binary = binary
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--data", self.dir, "--operate", "tcp://127.0.0.1:0",
             "--events", "tcp://127.0.0.1:0", "--admin", "tcp://127.0.0.1:0",
             "--metrics", "http://127.0.0.1:0", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = b""
        deadline = time.monotonic() + 20
        while not line.endswith(b"\n"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                pytest.fail(f"berthd did not start: {line!r}")
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line += os.read(self.proc.stdout.fileno(), 1)
        m = re.search(rb"operate=(\S+)", line)
        assert m, line
        self.operate = m.group(1).decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def berthd():
    b = Berthd("--backoff-initial-ms", "1", "--backoff-max-ms", "10", "--retries", "2")
    yield b
    b.close()


@pytest.fixture
def client(berthd):
    from berth import Client

    with Client(berthd.operate, worker_id="py-test") as c:
        yield c

"""Every nng URL berthd serves: ipc://, tls+tcp:// (the certificate checked),
and tcp:// on nng's own REP socket (--operate-nng)."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from berth import Client, TransportError
from conftest import Berthd


def round_trip(c: Client) -> None:
    t = "tr-" + uuid.uuid4().hex[:8]
    s = c.submit(t, b"over the wire")
    got = c.fetch(t, wait_ms=2000)
    assert [x.id for x in got] == [s.id]
    assert c.complete_batch(got) == [None]


def test_ipc(tmp_path):
    path = str(tmp_path / "operate.sock")
    b = Berthd("--operate", f"ipc://{path}")
    try:
        assert b.operate == f"ipc://{path}"
        with Client(b.operate) as c:
            round_trip(c)
    finally:
        b.close()


def test_operate_nng():
    b = Berthd("--operate-nng")
    try:
        with Client(b.operate) as c:
            round_trip(c)
    finally:
        b.close()


def test_tls_checks_the_certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    b = Berthd("--operate", "tls+tcp://127.0.0.1:0", "--tls-cert", str(cert), "--tls-key",
               str(key))
    try:
        assert b.operate.startswith("tls+tcp://")
        with Client(b.operate, tls_ca_file=str(cert), tls_server_name="localhost",
                    timeout_ms=5000) as c:
            round_trip(c)
        # By default the name checked is the URL's host (127.0.0.1), which
        # this certificate (for localhost) does not carry: refused.
        with pytest.raises(TransportError):
            with Client(b.operate, tls_ca_file=str(cert), timeout_ms=1000) as c:
                c.submit("tr", b"x")
        # The system's CAs do not vouch for it: no answer, never a plain one.
        with pytest.raises(TransportError):
            with Client(b.operate, tls_server_name="localhost", timeout_ms=1000) as c:
                c.submit("tr", b"x")
    finally:
        b.close()

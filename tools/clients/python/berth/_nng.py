"""libnng through ctypes: a REQ socket, and one round trip per context.

Only what a berth client needs: open a REQ socket, dial it (tcp://, ipc://,
tls+tcp:// with a CA file or the system's), and run request/answer round
trips on nng contexts, so that several threads may call at once (a worker
extends a lock while its handler runs). ctypes drops the GIL around every
foreign call, so a thread waiting on nng does not stop the others.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Optional

# nng's values (nng.h, 1.5): errors, durations, options.
NNG_ETIMEDOUT = 5
NNG_ECLOSED = 7
NNG_ECANCELED = 20
NNG_DURATION_INFINITE = -1
NNG_TLS_MODE_CLIENT = 0
NNG_TLS_AUTH_MODE_NONE = 0
NNG_TLS_AUTH_MODE_REQUIRED = 2
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


class _Socket(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class _Ctx(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class _Dialer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


_AIO_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_lib: Optional[ctypes.CDLL] = None
_lib_mu = threading.Lock()


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_mu:
        if _lib is not None:
            return _lib
        name = ctypes.util.find_library("nng") or "libnng.so.1"
        lib = ctypes.CDLL(name)
        p, i, sz, dur = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int32
        sigs = {
            "nng_req0_open": (i, [ctypes.POINTER(_Socket)]),
            "nng_close": (i, [_Socket]),
            "nng_socket_set_ms": (i, [_Socket, ctypes.c_char_p, dur]),
            "nng_socket_set_size": (i, [_Socket, ctypes.c_char_p, sz]),
            "nng_dialer_create": (i, [ctypes.POINTER(_Dialer), _Socket, ctypes.c_char_p]),
            "nng_dialer_start": (i, [_Dialer, i]),
            "nng_dialer_set_ptr": (i, [_Dialer, ctypes.c_char_p, p]),
            "nng_tls_config_alloc": (i, [ctypes.POINTER(p), i]),
            "nng_tls_config_free": (None, [p]),
            "nng_tls_config_ca_file": (i, [p, ctypes.c_char_p]),
            "nng_tls_config_server_name": (i, [p, ctypes.c_char_p]),
            "nng_tls_config_auth_mode": (i, [p, i]),
            "nng_ctx_open": (i, [ctypes.POINTER(_Ctx), _Socket]),
            "nng_ctx_close": (i, [_Ctx]),
            "nng_ctx_send": (None, [_Ctx, p]),
            "nng_ctx_recv": (None, [_Ctx, p]),
            "nng_aio_alloc": (i, [ctypes.POINTER(p), _AIO_CALLBACK, p]),
            "nng_aio_free": (None, [p]),
            "nng_aio_set_timeout": (None, [p, dur]),
            "nng_aio_wait": (None, [p]),
            "nng_aio_cancel": (None, [p]),
            "nng_aio_result": (i, [p]),
            "nng_aio_set_msg": (None, [p, p]),
            "nng_aio_get_msg": (p, [p]),
            "nng_msg_alloc": (i, [ctypes.POINTER(p), sz]),
            "nng_msg_append": (i, [p, ctypes.c_char_p, sz]),
            "nng_msg_body": (p, [p]),
            "nng_msg_len": (sz, [p]),
            "nng_msg_free": (None, [p]),
            "nng_strerror": (ctypes.c_char_p, [i]),
        }
        for fname, (res, args) in sigs.items():
            f = getattr(lib, fname)
            f.restype = res
            f.argtypes = args
        _lib = lib
        return lib


class NngError(Exception):
    """An nng call failed: errno is nng's error number."""

    def __init__(self, what: str, errno: int):
        self.errno = errno
        super().__init__(f"{what}: {_load().nng_strerror(errno).decode()}")


def url_host(url: str) -> str:
    """The host of scheme://host:port (brackets off an IPv6 address)."""
    rest = url.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _check(what: str, rv: int) -> None:
    if rv != 0:
        raise NngError(what, rv)


class ReqSocket:
    """A REQ socket dialled to url. request() may be called from any thread."""

    def __init__(self, url: str, *, recv_max: int, tls_ca_file: Optional[str] = None,
                 tls_server_name: Optional[str] = None, tls_insecure: bool = False):
        lib = _load()
        self._lib = lib
        self._sock = _Socket()
        self._tls = ctypes.c_void_p()
        self._closed = False
        self._mu = threading.Lock()
        self._inflight = 0
        self._idle = threading.Condition(self._mu)
        _check("nng_req0_open", lib.nng_req0_open(ctypes.byref(self._sock)))
        try:
            # A request re-sent by the transport would be a second fetch whose
            # first answer is dropped (its tasks would wait out their locks):
            # a call that times out is for the caller to retry.
            _check("resend time", lib.nng_socket_set_ms(self._sock, b"req:resend-time",
                                                        NNG_DURATION_INFINITE))
            _check("receive size", lib.nng_socket_set_size(self._sock, b"recv-size-max",
                                                           recv_max))
            d = _Dialer()
            _check(url, lib.nng_dialer_create(ctypes.byref(d), self._sock, url.encode()))
            if url.startswith("tls+"):
                _check("tls", lib.nng_tls_config_alloc(ctypes.byref(self._tls),
                                                       NNG_TLS_MODE_CLIENT))
                if tls_insecure:
                    _check("tls", lib.nng_tls_config_auth_mode(self._tls, NNG_TLS_AUTH_MODE_NONE))
                else:
                    ca = (tls_ca_file or SYSTEM_CA).encode()
                    _check("tls CA file", lib.nng_tls_config_ca_file(self._tls, ca))
                    _check("tls", lib.nng_tls_config_auth_mode(self._tls,
                                                               NNG_TLS_AUTH_MODE_REQUIRED))
                # The name the certificate must carry: the URL's host unless
                # told otherwise (nng drops the one it took from the URL when
                # a configuration of ours replaces its own).
                name = tls_server_name or url_host(url)
                if name:
                    _check("tls server name",
                           lib.nng_tls_config_server_name(self._tls, name.encode()))
                _check("tls", lib.nng_dialer_set_ptr(d, b"tls-config", self._tls))
            _check(url, lib.nng_dialer_start(d, 0))
        except BaseException:
            self.close()
            raise

    def request(self, data: bytes, timeout_ms: int,
                cancel: Optional[threading.Event] = None) -> bytes:
        """Sends data on a context of its own and returns the answer's bytes.

        Raises NngError (errno NNG_ETIMEDOUT when no answer came in time,
        NNG_ECANCELED when cancel was set, NNG_ECLOSED after close())."""
        lib = self._lib
        with self._mu:
            if self._closed:
                raise NngError("request", NNG_ECLOSED)
            self._inflight += 1
        ctx = _Ctx()
        aio = ctypes.c_void_p()
        ctx_open = False
        done = threading.Event()
        # nng calls this on its own thread when an operation ends; ctypes
        # takes the GIL for it. Kept referenced until the aio is freed.
        callback = _AIO_CALLBACK(lambda _arg: done.set())
        try:
            _check("context", lib.nng_ctx_open(ctypes.byref(ctx), self._sock))
            ctx_open = True
            _check("aio", lib.nng_aio_alloc(ctypes.byref(aio), callback, None))
            msg = ctypes.c_void_p()
            _check("message", lib.nng_msg_alloc(ctypes.byref(msg), 0))
            if lib.nng_msg_append(msg, data, len(data)) != 0:
                lib.nng_msg_free(msg)
                raise NngError("message", 2)
            lib.nng_aio_set_timeout(aio, timeout_ms)
            lib.nng_aio_set_msg(aio, msg)
            lib.nng_ctx_send(ctx, aio)
            rv = self._wait(aio, done, cancel)
            if rv != 0:
                lib.nng_msg_free(msg)  # not taken: still ours
                raise NngError("send", rv)
            done.clear()
            lib.nng_aio_set_timeout(aio, timeout_ms)
            lib.nng_ctx_recv(ctx, aio)
            rv = self._wait(aio, done, cancel)
            if rv != 0:
                raise NngError("receive", rv)
            reply = lib.nng_aio_get_msg(aio)
            try:
                n = lib.nng_msg_len(reply)
                return ctypes.string_at(lib.nng_msg_body(reply), n)
            finally:
                lib.nng_msg_free(reply)
        finally:
            if aio:
                lib.nng_aio_free(aio)  # (waits out the callback)
            if ctx_open:
                lib.nng_ctx_close(ctx)
            with self._mu:
                self._inflight -= 1
                if self._inflight == 0:
                    self._idle.notify_all()

    def _wait(self, aio: ctypes.c_void_p, done: threading.Event,
              cancel: Optional[threading.Event]) -> int:
        if cancel is None:
            done.wait()
        else:  # a cancel is seen within 50 ms
            while not done.wait(0.05):
                if cancel.is_set():
                    self._lib.nng_aio_cancel(aio)
            done.wait()
        return self._lib.nng_aio_result(aio)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Closes the socket once no request is in progress on it (nng must
        not close a context under a call): calls in flight end first."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            while self._inflight > 0:
                self._idle.wait()
        self._lib.nng_close(self._sock)
        if self._tls:
            self._lib.nng_tls_config_free(self._tls)
            self._tls = ctypes.c_void_p()

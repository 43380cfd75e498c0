"""Client: berth's operate surface, one method per operate method."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from google.protobuf.message import DecodeError

from berth import errors
from berth._nng import NNG_ECANCELED, NNG_ETIMEDOUT, NngError, ReqSocket
from berth._proto import operate_pb2 as pb

Bytes = Union[bytes, bytearray, memoryview, str]

# berthd's ceiling for wait_ms (--wait-max-ms, default 30 s): what a fetch or
# await that names no wait may take before its answer.
WAIT_MAX_MS = 30_000


def _bytes(b: Optional[Bytes]) -> bytes:
    if b is None:
        return b""
    return b.encode() if isinstance(b, str) else bytes(b)


@dataclass
class Submitted:
    id: str
    duplicate: bool  # the idempotency key matched an earlier submit: id is that one's


@dataclass
class Called:
    instance_id: str
    duplicate: bool


@dataclass
class Result:
    """A worker's answer to a call's task (or a completion's replacement payload)."""

    payload: bytes = b""
    content_type: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class TaskError:
    """A failure or refusal: code (short, machine-readable), message, details."""

    code: str
    message: str = ""
    details: str = ""


@dataclass
class RetryPolicy:
    """A call's own retry budget (CallRequest.retry); omitted fields take
    berthd's defaults."""

    timeout_ms: Optional[int] = None
    max_attempts: Optional[int] = None
    initial_backoff_ms: Optional[int] = None
    max_backoff_ms: Optional[int] = None
    multiplier: Optional[float] = None
    non_retryable_codes: Sequence[str] = ()


@dataclass
class Submit:
    """One item of submit_batch()."""

    topic: str
    payload: Bytes = b""
    headers: Optional[Mapping[str, str]] = None
    content_type: Optional[str] = None
    idempotency_key: Optional[str] = None
    delay_ms: Optional[int] = None
    not_before_ms: Optional[int] = None
    priority: Optional[int] = None


@dataclass
class Instance:
    """A call as await_call() saw it."""

    id: str
    state: str  # WAITING, BACKOFF, RESOLVED, FAILED
    attempt: int
    result: Optional[Result]
    error: Optional[TaskError]
    created_at_ms: int
    resolved_at_ms: Optional[int]

    @property
    def done(self) -> bool:
        return self.state in ("RESOLVED", "FAILED")


@dataclass
class Task:
    """A task this client's worker holds (fetch()), with what it takes to answer it."""

    id: str
    topic: str
    payload: bytes
    headers: Dict[str, str]
    content_type: Optional[str]
    instance_id: Optional[str]  # set for a call's task
    attempt: int
    retries_left: int
    lock_token: str
    lock_expires_at_ms: int
    created_at_ms: int
    priority: int
    available_at_ms: int
    worker_id: str


@dataclass
class Failed:
    terminal: bool  # the failure budget is spent: the task waits for an operator
    retries_left: int
    available_at_ms: Optional[int]  # fetchable again from (when not terminal)


class Fetched(List[Task]):
    """The tasks a fetch claimed, and for the completions it carried, one
    entry each in order: None (kept) or the error it was answered with."""

    complete_errors: List[Optional[errors.BerthError]]

    def __init__(self, tasks: Iterable[Task], complete_errors: List[Optional[errors.BerthError]]):
        super().__init__(tasks)
        self.complete_errors = complete_errors


Completion = Union[Task, Tuple[Task, Optional[Union[Result, Bytes]]]]


def check_result(r: object) -> None:
    """A completion's result is None, bytes, str or a Result: else TypeError."""
    if r is not None and not isinstance(r, (Result, bytes, bytearray, memoryview, str)):
        raise TypeError(f"a result is bytes, str or berth.Result, not {type(r).__name__}")


def _result_pb(r: Optional[Union[Result, Bytes]]) -> Optional[pb.Result]:
    check_result(r)
    if r is None:
        return None
    if not isinstance(r, Result):
        r = Result(payload=_bytes(r))
    m = pb.Result(payload=_bytes(r.payload))
    if r.content_type is not None:
        m.content_type = r.content_type
    m.headers.update(r.headers)
    return m


def _error_pb(e: TaskError) -> pb.Error:
    return pb.Error(code=e.code, message=e.message, details=e.details)


def _opt(m, name: str):
    return getattr(m, name) if m.HasField(name) else None


class Client:
    """A connection to berthd's operate surface (any nng URL: tcp://,
    ipc://, tls+tcp://). Thread-safe: each call runs on an nng context of
    its own. Close it (or use it in a with block) when done.

    Every method raises a BerthError subclass when berthd answers with
    anything but OK, and TransportError when berthd cannot be reached or
    does not answer within timeout_ms (plus the wait, for fetch and
    await_call): a request that timed out may still have been done.
    """

    def __init__(self, url: str, *, timeout_ms: int = 10_000, worker_id: Optional[str] = None,
                 tls_ca_file: Optional[str] = None, tls_server_name: Optional[str] = None,
                 tls_insecure: bool = False, recv_max: int = 64 << 20):
        self.url = url
        self.timeout_ms = timeout_ms
        self.worker_id = worker_id or f"{socket.gethostname()}-{threading.get_native_id()}"
        try:
            self._sock = ReqSocket(url, recv_max=recv_max, tls_ca_file=tls_ca_file,
                                   tls_server_name=tls_server_name, tls_insecure=tls_insecure)
        except NngError as e:
            raise errors.TransportError(errors.UNAVAILABLE, str(e)) from e

    def close(self) -> None:
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._sock.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the round trip ----

    def _call(self, method: str, msg, *, wait_ms: int = 0,
              cancel: Optional[threading.Event] = None):
        req = pb.Request()
        getattr(req, method).CopyFrom(msg)
        try:
            raw = self._sock.request(req.SerializeToString(), self.timeout_ms + wait_ms, cancel)
        except NngError as e:
            if e.errno == NNG_ETIMEDOUT:
                raise errors.TransportError(errors.DEADLINE_EXCEEDED,
                                            f"no answer within {self.timeout_ms + wait_ms} ms "
                                            f"({method}; it may have been done)") from e
            if e.errno == NNG_ECANCELED:
                raise errors.Cancelled(errors.CANCELLED, f"{method} cancelled") from e
            raise errors.TransportError(errors.UNAVAILABLE, f"{method}: {e}") from e
        try:
            resp = pb.Response.FromString(raw)
        except DecodeError as e:
            raise errors.BerthError(errors.INTERNAL, "the answer is not a berth Response") from e
        err = errors.from_status(resp.status)
        if err is not None:
            raise err
        if resp.WhichOneof("method") != method:
            raise errors.BerthError(errors.INTERNAL, f"the answer to {method} is not one")
        return getattr(resp, method)

    # ---- producers ----

    @staticmethod
    def _submit_pb(s: Submit, m) -> None:
        m.topic = s.topic
        m.payload = _bytes(s.payload)
        if s.headers:
            m.headers.update(s.headers)
        for name in ("content_type", "idempotency_key", "delay_ms", "not_before_ms", "priority"):
            v = getattr(s, name)
            if v is not None:
                setattr(m, name, v)

    def submit(self, topic: str, payload: Bytes = b"", *,
               headers: Optional[Mapping[str, str]] = None, content_type: Optional[str] = None,
               idempotency_key: Optional[str] = None, delay_ms: Optional[int] = None,
               not_before_ms: Optional[int] = None, priority: Optional[int] = None) -> Submitted:
        """Hands a task to berth; returns once it is on disk."""
        m = pb.SubmitRequest()
        self._submit_pb(Submit(topic, payload, headers, content_type, idempotency_key, delay_ms,
                               not_before_ms, priority), m)
        r = self._call("submit", m)
        return Submitted(r.id, r.duplicate)

    def submit_batch(self, items: Iterable[Submit]) -> List[Submitted]:
        """Submits several tasks in one request, kept all or none."""
        m = pb.SubmitBatchRequest()
        for s in items:
            self._submit_pb(s, m.items.add())
        r = self._call("submit_batch", m)
        return [Submitted(i.id, i.duplicate) for i in r.items]

    def call(self, topic: str, payload: Bytes = b"", *,
             headers: Optional[Mapping[str, str]] = None, content_type: Optional[str] = None,
             idempotency_key: Optional[str] = None, retry: Optional[RetryPolicy] = None,
             delay_ms: Optional[int] = None, not_before_ms: Optional[int] = None,
             priority: Optional[int] = None) -> Called:
        """Starts a call: a task whose outcome await_call() returns."""
        m = pb.CallRequest()
        self._submit_pb(Submit(topic, payload, headers, content_type, idempotency_key, delay_ms,
                               not_before_ms, priority), m)
        if retry is not None:
            rp = m.retry
            rp.SetInParent()
            for name in ("timeout_ms", "max_attempts", "initial_backoff_ms", "max_backoff_ms",
                         "multiplier"):
                v = getattr(retry, name)
                if v is not None:
                    setattr(rp, name, v)
            rp.non_retryable_codes.extend(retry.non_retryable_codes)
        r = self._call("call", m)
        return Called(r.instance_id, r.duplicate)

    def await_call(self, instance_id: str, wait_ms: Optional[int] = None, *,
                   cancel: Optional[threading.Event] = None) -> Instance:
        """The call's state, once it has ended or wait_ms has passed."""
        m = pb.AwaitCallRequest(instance_id=instance_id)
        if wait_ms is not None:
            m.wait_ms = wait_ms
        r = self._call("await_call", m, wait_ms=WAIT_MAX_MS if wait_ms is None else wait_ms,
                       cancel=cancel).instance
        res = None
        if r.HasField("result"):
            res = Result(r.result.payload, _opt(r.result, "content_type"), dict(r.result.headers))
        err = TaskError(r.error.code, r.error.message, r.error.details) \
            if r.HasField("error") else None
        return Instance(r.id, pb.Instance.State.Name(r.state), r.attempt, res, err,
                        r.created_at_ms, _opt(r, "resolved_at_ms"))

    # ---- workers ----

    def _guard(self, m, task: Task) -> None:
        m.task_id = task.id
        m.worker_id = task.worker_id
        m.lock_token = task.lock_token

    def _complete_pb(self, c: Completion, m) -> None:
        task, result = (c, None) if isinstance(c, Task) else c
        self._guard(m, task)
        r = _result_pb(result)
        if r is not None:
            m.result.CopyFrom(r)

    def fetch(self, topics: Union[str, Sequence[str]], *, max_tasks: Optional[int] = None,
              lock_ms: Optional[int] = None, wait_ms: Optional[int] = None,
              worker_id: Optional[str] = None, completes: Sequence[Completion] = (),
              cancel: Optional[threading.Event] = None) -> Fetched:
        """Claims up to max_tasks tasks of the topics, waiting up to wait_ms for
        one. completes (tasks, or (task, result) pairs) are completed first,
        in the same request: Fetched.complete_errors says how each went."""
        m = pb.FetchRequest(worker_id=worker_id or self.worker_id)
        m.topics.extend([topics] if isinstance(topics, str) else topics)
        if max_tasks is not None:
            m.max_tasks = max_tasks
        if lock_ms is not None:
            m.lock_ms = lock_ms
        if wait_ms is not None:
            m.wait_ms = wait_ms
        for c in completes:
            self._complete_pb(c, m.completes.add())
        r = self._call("fetch", m, wait_ms=WAIT_MAX_MS if wait_ms is None else wait_ms,
                       cancel=cancel)
        tasks = [Task(t.id, t.topic, t.payload, dict(t.headers), _opt(t, "content_type"),
                      _opt(t, "instance_id"), t.attempt, t.retries_left, t.lock_token,
                      t.lock_expires_at_ms, t.created_at_ms, t.priority, t.available_at_ms,
                      m.worker_id) for t in r.tasks]
        return Fetched(tasks, [errors.from_status(s) for s in r.complete_statuses])

    def complete(self, task: Task, result: Optional[Union[Result, Bytes]] = None) -> None:
        """Completes a task this worker holds (result: a call's answer)."""
        m = pb.CompleteRequest()
        self._complete_pb((task, result), m)
        self._call("complete", m)

    def complete_batch(self, items: Sequence[Completion]) -> List[Optional[errors.BerthError]]:
        """Completes several tasks; one entry per item, in order: None (kept)
        or the error it was answered with (not raised)."""
        m = pb.CompleteBatchRequest()
        for c in items:
            self._complete_pb(c, m.items.add())
        r = self._call("complete_batch", m)
        return [errors.from_status(s) for s in r.statuses]

    def fail(self, task: Task, error: TaskError, *, retry_in_ms: Optional[int] = None,
             retries_left: Optional[int] = None) -> Failed:
        """Reports a failed attempt: the task is retried after its backoff
        unless its failure budget is spent (then terminal)."""
        m = pb.FailRequest(error=_error_pb(error))
        self._guard(m, task)
        if retry_in_ms is not None:
            m.retry_in_ms = retry_in_ms
        if retries_left is not None:
            m.retries_left = retries_left
        r = self._call("fail", m)
        return Failed(r.terminal, r.retries_left, _opt(r, "available_at_ms"))

    def refuse(self, task: Task, error: TaskError) -> None:
        """Ends the task for good: it cannot be done (a call resolves with the error)."""
        m = pb.RefuseRequest(error=_error_pb(error))
        self._guard(m, task)
        self._call("refuse", m)

    def extend_lock(self, task: Task, lock_ms: Optional[int] = None) -> int:
        """Keeps the task locked lock_ms from now; returns (and sets on task)
        the new expiry."""
        m = pb.ExtendLockRequest()
        self._guard(m, task)
        if lock_ms is not None:
            m.lock_ms = lock_ms
        r = self._call("extend_lock", m)
        task.lock_expires_at_ms = r.lock_expires_at_ms
        return r.lock_expires_at_ms

    def release(self, task: Task) -> None:
        """Gives the task back: fetchable again at once, no failure counted."""
        m = pb.ReleaseRequest()
        self._guard(m, task)
        self._call("release", m)


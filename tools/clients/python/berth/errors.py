"""berth's answers that are not OK, as exceptions.

Every exception carries what berthd's Status said: ``code`` (gRPC's
numbering), ``message``, ``verdict`` (what a worker must do with a task it
held), ``engine_code`` and ``retryable`` (a refusal by the engine), and
``field`` and ``limit`` (a bound that was passed). A verdict names the
class when there is one (``LockLost``, ``LockHeld``, ``Terminal``,
``NotFound``); otherwise the code does (``InvalidArgument``...).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

# Status codes (operate.proto's Code, gRPC's canonical numbering).
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

CODE_NAMES: Dict[int, str] = {
    OK: "OK", CANCELLED: "CANCELLED", UNKNOWN: "UNKNOWN", INVALID_ARGUMENT: "INVALID_ARGUMENT",
    DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED", NOT_FOUND: "NOT_FOUND",
    ALREADY_EXISTS: "ALREADY_EXISTS", PERMISSION_DENIED: "PERMISSION_DENIED",
    RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED", FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ABORTED: "ABORTED", OUT_OF_RANGE: "OUT_OF_RANGE", UNIMPLEMENTED: "UNIMPLEMENTED",
    INTERNAL: "INTERNAL", UNAVAILABLE: "UNAVAILABLE", DATA_LOSS: "DATA_LOSS",
    UNAUTHENTICATED: "UNAUTHENTICATED",
}

# Verdicts (Status.Verdict).
LOCK_LOST = "LOCK_LOST"
LOCK_HELD = "LOCK_HELD"
TERMINAL = "TERMINAL"
VERDICT_NOT_FOUND = "NOT_FOUND"


class BerthError(Exception):
    """berthd answered with a status that is not OK."""

    def __init__(self, code: int, message: str = "", *, verdict: Optional[str] = None,
                 engine_code: Optional[str] = None, retryable: Optional[bool] = None,
                 field: Optional[str] = None, limit: Optional[int] = None):
        self.code = code
        self.message = message
        self.verdict = verdict
        self.engine_code = engine_code
        self.retryable = retryable
        self.field = field
        self.limit = limit
        super().__init__(self._describe())

    @property
    def code_name(self) -> str:
        return CODE_NAMES.get(self.code, str(self.code))

    def _describe(self) -> str:
        s = f"{self.code_name}: {self.message}" if self.message else self.code_name
        extra = [f"{k}={v}" for k, v in (("verdict", self.verdict),
                                           ("engine_code", self.engine_code),
                                           ("field", self.field), ("limit", self.limit))
                 if v is not None]
        return s + (f" ({', '.join(extra)})" if extra else "")


class TransportError(BerthError):
    """berthd could not be reached, or did not answer in time (code UNAVAILABLE
    or DEADLINE_EXCEEDED). A request that timed out may still have been done."""


class Cancelled(BerthError):
    """The caller cancelled the request (code CANCELLED)."""


class InvalidArgument(BerthError):
    pass


class NotFound(BerthError):
    """No such task, call or deployment (code NOT_FOUND, or the verdict NOT_FOUND:
    the task is gone; stop working on it)."""


class PermissionDenied(BerthError):
    pass


class ResourceExhausted(BerthError):
    pass


class FailedPrecondition(BerthError):
    pass


class Aborted(BerthError):
    pass


class Unimplemented(BerthError):
    pass


class Internal(BerthError):
    pass


class Unavailable(BerthError):
    pass


class Unauthenticated(BerthError):
    pass


class LockLost(Aborted):
    """The lock expired or was released and the task is fetchable again: stop,
    never complete it again."""


class LockHeld(Aborted):
    """Another claim holds the task: it is not yours."""


class Terminal(FailedPrecondition):
    """The task's failure budget is spent: stop for good."""


_BY_CODE: Dict[int, Type[BerthError]] = {
    CANCELLED: Cancelled,
    INVALID_ARGUMENT: InvalidArgument,
    NOT_FOUND: NotFound,
    PERMISSION_DENIED: PermissionDenied,
    RESOURCE_EXHAUSTED: ResourceExhausted,
    FAILED_PRECONDITION: FailedPrecondition,
    ABORTED: Aborted,
    UNIMPLEMENTED: Unimplemented,
    INTERNAL: Internal,
    UNAVAILABLE: Unavailable,
    UNAUTHENTICATED: Unauthenticated,
}

_BY_VERDICT: Dict[str, Type[BerthError]] = {
    LOCK_LOST: LockLost,
    LOCK_HELD: LockHeld,
    TERMINAL: Terminal,
    VERDICT_NOT_FOUND: NotFound,
}


def from_status(status) -> Optional[BerthError]:
    """The exception a Status stands for, or None when it is OK."""
    code = status.code if status.HasField("code") else OK
    if code == OK:
        return None
    verdict = None
    if status.HasField("verdict") and status.verdict != 0:
        verdict = status.DESCRIPTOR.fields_by_name["verdict"].enum_type \
            .values_by_number[status.verdict].name
    cls = _BY_VERDICT.get(verdict or "") or _BY_CODE.get(code, BerthError)
    return cls(code, status.message,
               verdict=verdict,
               engine_code=status.engine_code if status.HasField("engine_code") else None,
               retryable=status.retryable if status.HasField("retryable") else None,
               field=status.field if status.HasField("field") else None,
               limit=status.limit if status.HasField("limit") else None)

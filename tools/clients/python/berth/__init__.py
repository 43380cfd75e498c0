"""berth's Python client: producers submit and call, workers fetch and answer.

    from berth import Client, Worker

    with Client("tcp://127.0.0.1:7450") as c:
        c.submit("emails", b'{"to": "ada@example.com"}')
        Worker(c, "emails", lambda task: print(task.payload)).run()

Transport: libnng through ctypes (Debian's libnng1), so every nng URL
works. Message classes: generated from proto/berth/v1 by protoc.
"""

from berth.client import (Called, Client, Failed, Fetched, Instance, Result, RetryPolicy, Submit,
                          Submitted, Task, TaskError)
from berth.errors import (Aborted, BerthError, Cancelled, FailedPrecondition, Internal,
                          InvalidArgument, LockHeld, LockLost, NotFound, PermissionDenied,
                          ResourceExhausted, Terminal, TransportError, Unauthenticated,
                          Unavailable, Unimplemented)
from berth.worker import Refuse, Worker

__all__ = [
    "Client", "Worker", "Refuse", "Called", "Failed", "Fetched", "Instance", "Result",
    "RetryPolicy", "Submit", "Submitted", "Task", "TaskError", "BerthError", "TransportError",
    "Cancelled", "InvalidArgument", "NotFound", "PermissionDenied", "ResourceExhausted",
    "FailedPrecondition", "Aborted", "Unimplemented", "Internal", "Unavailable",
    "Unauthenticated", "LockLost", "LockHeld", "Terminal",
]

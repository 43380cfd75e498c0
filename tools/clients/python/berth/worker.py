"""Worker: long-polls a topic and runs a handler per task.

The handler's return value completes the task (None: no result; bytes or
str: the result's payload; a Result), carried on the next fetch, so a busy
worker makes one round trip per batch. A handler that raises Refuse refuses
the task (it can never be done); any other exception fails it, with the
exception's type as the error code, its text as the message and the
traceback as the details, and berth retries it after its backoff. While a
handler runs longer than a third of the lock, the lock is extended. stop()
(or SIGINT/SIGTERM during run()) ends the loop after the fetch in progress,
within wait_ms, and completes what was done.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback
from typing import Callable, List, Optional, Sequence, Tuple, Union

from berth import errors
from berth.client import Bytes, Client, Result, Task, TaskError, check_result

log = logging.getLogger("berth.worker")

Handler = Callable[[Task], Optional[Union[Result, Bytes]]]

# berthd's bounds on an error (engine/check.h): longer is cut, at a
# character boundary.
ERROR_CODE_MAX = 128
ERROR_MESSAGE_MAX = 4096
ERROR_DETAILS_MAX = 65536


def _cut(s: str, limit: int) -> str:
    b = s.encode()
    return s if len(b) <= limit else b[:limit].decode(errors="ignore")


class Refuse(Exception):
    """Raise from a handler to refuse its task: it can never be done. The task
    ends (a call resolves with this error)."""

    def __init__(self, code: str, message: str = "", details: str = ""):
        super().__init__(message or code)
        self.code = code
        self.message = message
        self.details = details


class _Extender:
    """Extends one task's lock every `every` seconds until stopped or lost."""

    def __init__(self, client: Client, task: Task, lock_ms: Optional[int], every: float):
        self._client, self._task, self._lock_ms, self._every = client, task, lock_ms, every
        self._stop = threading.Event()
        self.lost: Optional[errors.BerthError] = None
        self._thread = threading.Thread(target=self._run, name=f"berth-extend-{task.id[:8]}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._client.extend_lock(self._task, self._lock_ms)
            except (errors.LockLost, errors.LockHeld, errors.NotFound, errors.Terminal) as e:
                self.lost = e
                log.warning("task %s: lock not extended: %s", self._task.id, e)
                return
            except errors.BerthError as e:  # berthd unreachable a while: try again
                log.warning("task %s: extending its lock failed: %s", self._task.id, e)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Worker:
    """Runs handler on the tasks of topics until stop().

    max_tasks: tasks per fetch; lock_ms: each claim's lock (None: berthd's
    default); wait_ms: how long a fetch waits for a task (also how soon
    stop() is seen); retry_pause_s: the pause after berthd could not be
    reached, doubled up to 30 s while it stays so.
    """

    def __init__(self, client: Client, topics: Union[str, Sequence[str]], handler: Handler, *,
                 max_tasks: int = 1, lock_ms: Optional[int] = None, wait_ms: int = 5_000,
                 retry_pause_s: float = 0.5):
        self.client = client
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.handler = handler
        self.max_tasks = max_tasks
        self.lock_ms = lock_ms
        self.wait_ms = wait_ms
        self.retry_pause_s = retry_pause_s
        self._stopping = threading.Event()
        self.handled = 0  # tasks the handler ran on

    def stop(self) -> None:
        self._stopping.set()

    def run(self, *, handle_signals: bool = True) -> None:
        """The loop, on the calling thread. SIGINT and SIGTERM stop it when it
        runs on the main thread and handle_signals is true."""
        restore = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                restore.append((sig, signal.signal(sig, lambda *_: self.stop())))
        try:
            self._loop()
        finally:
            for sig, old in restore:
                signal.signal(sig, old)

    def _loop(self) -> None:
        done: List[Tuple[Task, Optional[Union[Result, Bytes]]]] = []
        pause = self.retry_pause_s
        try:
            while not self._stopping.is_set():
                try:
                    fetched = self.client.fetch(self.topics, max_tasks=self.max_tasks,
                                                lock_ms=self.lock_ms, wait_ms=self.wait_ms,
                                                completes=done)
                except errors.ResourceExhausted as e:
                    if not done:  # berthd is short of room: wait and see
                        log.warning("fetch: %s; again in %.1f s", e, pause)
                        self._stopping.wait(pause)
                        continue
                    # Too big together (each is under the payload bound;
                    # several need not be): one request each.
                    done = self._complete_each(done)
                    continue
                except (errors.TransportError, errors.Unavailable) as e:
                    if self.client.closed:
                        break
                    # The completions may or may not have been kept: they go
                    # again with the next fetch (a repeat of a kept one is
                    # answered NOT_FOUND, which is logged and dropped).
                    log.warning("fetch: %s; again in %.1f s", e, pause)
                    self._stopping.wait(pause)
                    pause = min(pause * 2, 30.0)
                    continue
                pause = self.retry_pause_s
                self._report(done, fetched.complete_errors)
                done = []
                for task in fetched:
                    outcome = self._handle(task)
                    if outcome is not None:
                        done.append(outcome)
        finally:  # what was done is completed, however the loop ends
            if done and not self.client.closed:
                try:
                    self._report(done, self.client.complete_batch(done))
                except errors.BerthError:
                    self._complete_each(done)

    def _complete_each(self, done):
        """Completes one request each; returns those berthd could not be asked about."""
        for i, (task, result) in enumerate(done):
            try:
                self.client.complete(task, result)
            except (errors.TransportError, errors.Unavailable):
                return done[i:]
            except errors.BerthError as e:
                log.warning("task %s: completion not kept: %s", task.id, e)
        return []

    @staticmethod
    def _report(done, statuses) -> None:
        for (task, _), err in zip(done, statuses):
            if err is not None:
                log.warning("task %s: completion not kept: %s", task.id, err)

    def _handle(self, task: Task) -> Optional[Tuple[Task, Optional[Union[Result, Bytes]]]]:
        # A third of the lock: as asked for, else as berthd's clock gave it
        # (this machine's clock may be off from berthd's).
        lock_s = self.lock_ms / 1000.0 if self.lock_ms else \
            task.lock_expires_at_ms / 1000.0 - time.time()
        ext = _Extender(self.client, task, self.lock_ms, max(lock_s, 0.3) / 3)
        self.handled += 1
        try:
            result = self.handler(task)
            check_result(result)  # the wrong kind fails the task, as a raise would
        except Refuse as r:
            ext.stop()
            self._answer(task, lambda: self.client.refuse(task, TaskError(
                _cut(r.code, ERROR_CODE_MAX), _cut(r.message, ERROR_MESSAGE_MAX),
                _cut(r.details, ERROR_DETAILS_MAX))))
            return None
        except Exception as e:  # the handler's failure is the task's
            ext.stop()
            err = TaskError(_cut(type(e).__name__, ERROR_CODE_MAX),
                            _cut(str(e), ERROR_MESSAGE_MAX),
                            _cut(traceback.format_exc(), ERROR_DETAILS_MAX))
            self._answer(task, lambda: self.client.fail(task, err))
            return None
        ext.stop()
        if ext.lost is not None:
            return None  # not ours any more: completing it would be refused
        return (task, result)

    @staticmethod
    def _answer(task: Task, send: Callable[[], object]) -> None:
        try:
            send()
        except errors.BerthError as e:
            log.warning("task %s: %s", task.id, e)

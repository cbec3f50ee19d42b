"""How a running job learns that it must end: SIGTERM or SIGINT (a cancel), or the end of its stdin
(the parent has gone).

Everything that matters runs in the main thread, and so do Python's signal handlers. Outside a
`polled()` block the handler raises `Stopped` at once, wherever the main thread is: loading a
model, converting, saving. mlx-lm offers no safe point inside those, and what they leave behind is
a partial output that the job removes anyway. Inside `polled()` (the training loop) the handler only
records the request, and the loop calls `check()` between iterations, so an optimizer step is never
cut in half. After `finish()` nothing stops the job any more: its result is made, or its end is
being written.

`Stopped` is a BaseException, like KeyboardInterrupt, so that library code which catches Exception
cannot swallow it.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from types import FrameType

from mlxhost.job import EXIT_CANCELLED, EXIT_PARENT_GONE, PARENT_GONE
from mlxhost.wire.admin.jobs import JobState

__all__ = ["Stop", "Stopped"]

STDIN_FILENO = 0  # the parent's pipe, read as a descriptor (see Stop._watch_stdin)


class Stopped(BaseException):
    def __init__(self, state: JobState, error: str, exit_code: int) -> None:
        super().__init__(error)
        self.state = state
        self.error = error
        self.exit_code = exit_code


def _cancelled() -> Stopped:
    return Stopped(JobState.CANCELLED, "cancelled", EXIT_CANCELLED)


def _parent_gone() -> Stopped:
    return Stopped(JobState.INTERRUPTED, PARENT_GONE, EXIT_PARENT_GONE)


class _Mode(Enum):
    INTERRUPT = "interrupt"  # raise in the main thread at once
    POLL = "poll"  # record; check() raises at the next safe point
    FINISHED = "finished"  # too late to stop


class Stop:
    def __init__(self) -> None:
        self._mode = _Mode.INTERRUPT
        self._requested: Stopped | None = None
        self._parent_gone = False  # set by the stdin thread before it signals the main thread

    def install(self) -> None:
        """Handle SIGTERM and SIGINT, and watch stdin for its end when it is the parent's pipe."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if _is_pipe(STDIN_FILENO):
            # /dev/null or a terminal (someone running the job by hand) says nothing about a parent.
            threading.Thread(target=self._watch_stdin, name="mlxhost-job-parent-watch", daemon=True).start()

    @contextmanager
    def polled(self) -> Iterator[None]:
        """Within this block a stop waits for `check()`; a stop requested meanwhile raises on leaving it."""
        self.check()
        self._mode = _Mode.POLL
        try:
            yield
        finally:
            if self._mode is _Mode.POLL:
                self._mode = _Mode.INTERRUPT
        self.check()

    def check(self) -> None:
        """Raise `Stopped` if a stop was requested (a safe point)."""
        if self._requested is not None and self._mode is not _Mode.FINISHED:
            raise self._requested

    @property
    def requested(self) -> Stopped | None:
        """The stop asked for, if any: what really ended a job whose error merely wraps it."""
        return self._requested

    def finish(self) -> None:
        """From now on, nothing stops the job: it is writing its end."""
        self._mode = _Mode.FINISHED

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._requested is not None or self._mode is _Mode.FINISHED:
            return  # the first request decides; a second one must not cut the cleanup short
        self._requested = _parent_gone() if self._parent_gone else _cancelled()
        if self._mode is _Mode.INTERRUPT:
            raise self._requested

    def _watch_stdin(self) -> None:
        # os.read on the descriptor, not sys.stdin: a thread parked in a buffered read holds the
        # buffer's lock, and the interpreter aborts when it finds that lock taken at exit.
        try:
            while os.read(STDIN_FILENO, 4096):
                pass
        except OSError:
            pass  # a broken pipe says the same as its end
        self._parent_gone = True
        # The handler runs in the main thread (where MLX runs, and where Stopped must be raised);
        # a signal aimed at it also wakes it from a blocking call.
        main = threading.main_thread().ident
        if main is not None:
            signal.pthread_kill(main, signal.SIGTERM)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:  # closed
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)

"""Signals held while a stopping command writes its end.

A command that Ctrl-C or SIGTERM asked to stop still has work to finish: a run writes the snapshot
of its last step, ``status.json`` and the lines that say how to continue; ``render`` and
``export`` say how far they got. A second signal in the middle of that would raise an exception
there (a traceback instead of the line, ``status.json`` left ``running``), so while it runs the
signals are only noted (:func:`signals_held`); once a program's ``main`` has returned, a late
signal is ignored (:func:`main_to_its_end`). A reader of standard output that goes away
(``| head``) stops the output, not the command (:class:`PipeSafeStdout`). Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["PipeSafeStdout", "handlers_replaced", "main_to_its_end", "pipe_safe_stdout", "signals_held"]


@contextlib.contextmanager
def handlers_replaced(handlers: dict[int, Callable[[int, Any], None]]) -> Iterator[None]:
    """Inside, each signal of ``handlers`` has the handler given for it; the previous ones are back
    on leaving (a handler Python did not install: the default). Only the main thread may set
    handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Inside, SIGINT and SIGTERM are noted (the list yielded gets their numbers) and not acted on;
    their handlers are back on leaving. For the end of a command that is already stopping (module
    docstring). Outside the main thread it changes nothing (and notes nothing)."""
    noted: list[int] = []
    with handlers_replaced({signum: lambda number, frame: noted.append(number)
                            for signum in (signal.SIGINT, signal.SIGTERM)}):
        yield noted


def main_to_its_end(load_main: Callable[[], Callable[[], int]], what: str) -> int:
    """The exit status of ``load_main()()`` — an entry point's ``main``, imported inside (a
    program's modules take a moment to load) — run as ``python -m`` does: a Ctrl-C before
    ``main`` could take it ends with one line, ``interrupted before the WHAT started``, and 130.
    Standard output is a :class:`PipeSafeStdout` while it runs.
    Afterwards SIGINT and SIGTERM are ignored: the command has ended and said how, and a late
    copy of the signal (one passed on by ``ngptune``) must change neither that nor the status."""
    pipe_safe_stdout()
    try:
        code = load_main()()
    except KeyboardInterrupt:
        print(f"interrupted before the {what} started", file=sys.stderr)
        code = 130
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    return code


def pipe_safe_stdout() -> None:
    """Make ``sys.stdout`` a :class:`PipeSafeStdout` (once; a command's entry point calls it)."""
    if sys.stdout is not None and not isinstance(sys.stdout, PipeSafeStdout):
        sys.stdout = PipeSafeStdout(sys.stdout)


class PipeSafeStdout:
    """Standard output that outlives its reader: once a write or flush meets a closed pipe (the
    command piped into ``head``), the file descriptor is pointed at ``os.devnull`` and the
    command goes on without its output (a training run still writes its snapshots and
    ``status.json``) instead of failing with BrokenPipeError. Everything else is the wrapped
    stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self.drop_output()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.drop_output()

    def drop_output(self) -> None:
        """Point the stream's file descriptor at ``os.devnull`` (what is buffered goes there too)."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

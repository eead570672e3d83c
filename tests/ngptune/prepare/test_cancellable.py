"""A signal during a pycolmap call cancels it and is raised only once the call has returned, so
``prepare`` never removes its scratch folder under a still-working COLMAP thread."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

pytest.importorskip("pycolmap")

from ngptune.errors import PrepareError  # noqa: E402
from ngptune.prepare.sfm import run_cancellable  # noqa: E402


class Stopped(KeyboardInterrupt):
    pass


def _slow_call(seen: dict, send: int | None):
    """A stand-in for a pycolmap call: sends ``send`` to this process, then works until cancelled,
    then keeps working a while (COLMAP finishing its batch) before it returns."""

    def call(*, cancellation_token) -> str:
        if send is not None:
            os.kill(os.getpid(), send)
        deadline = time.monotonic() + 10
        while not cancellation_token.is_cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["cancelled"] = cancellation_token.is_cancelled
        time.sleep(0.3)
        seen["returned_at"] = time.monotonic()
        return "model"

    return call


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_call_and_is_raised_after_it_returned(signum: int) -> None:
    assert threading.current_thread() is threading.main_thread()
    raised_at: list[float] = []

    def handler(sig, frame):
        raised_at.append(time.monotonic())
        raise Stopped()

    previous = signal.signal(signum, handler)
    seen: dict = {}
    try:
        with pytest.raises(Stopped):
            run_cancellable("matching", _slow_call(seen, signum))
        assert signal.getsignal(signum) is handler  # the caller's handler is back in place
    finally:
        signal.signal(signum, previous)
    assert seen["cancelled"] is True
    assert len(raised_at) == 1 and raised_at[0] >= seen["returned_at"]


def test_without_a_signal_the_value_comes_back_and_handlers_are_unchanged() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def call(*, cancellation_token) -> int:
        assert not cancellation_token.is_cancelled
        return 7

    assert run_cancellable("features", call) == 7
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_failing_call_names_its_stage() -> None:
    def call(*, cancellation_token) -> None:
        raise RuntimeError("pairs.txt: no such file")

    with pytest.raises(PrepareError, match=r"^matching: COLMAP failed: RuntimeError: pairs.txt: no such file$"):
        run_cancellable("matching", call)


def test_a_handler_that_returns_still_stops_the_cancelled_stage() -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda sig, frame: calls.append(sig))
    seen: dict = {}
    try:
        with pytest.raises(KeyboardInterrupt, match="the stage was cancelled"):
            run_cancellable("mapping", _slow_call(seen, signal.SIGTERM))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls == [signal.SIGTERM] and seen["cancelled"] is True

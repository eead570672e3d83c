"""Ctrl-C while one process trains (trainer/run/interrupt.py): the first SIGINT asks to stop after
the step under way, a second one stops at once, and leaving the loop restores Python's handler."""

from __future__ import annotations

import os
import signal

import pytest

from trainer.run.interrupt import StopAfterStep, StoppedAfterStep, TerminatedAfterStep
from trainer.run.status import Terminated, raise_terminated


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler for the test (a test run may start with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_the_first_ctrl_c_stops_after_the_step_and_the_second_at_once(default_sigint, capfd):
    steps = {"done": 3}
    seen = []
    with pytest.raises(StoppedAfterStep) as stopped:
        with StopAfterStep(lambda: steps["done"]) as stop:
            hook = stop.after(lambda step, t: seen.append(step))
            hook(3, 0.1)  # no Ctrl-C yet: the loop goes on
            os.kill(os.getpid(), signal.SIGINT)  # lands inside "step 4": no KeyboardInterrupt there
            steps["done"] = 4
            with pytest.raises(KeyboardInterrupt) as again:
                os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: Python's handler, at once
            assert not isinstance(again.value, StoppedAfterStep)
            hook(4, 0.2)  # the step finished: its hook runs, then the stop
    assert stopped.value.step == 4 and seen == [3, 4]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert capfd.readouterr().err.split("\n") == [  # under 80 columns
        "", "Ctrl-C: stopping after this step, keeping a snapshot of it", "  (Ctrl-C again stops at once)", ""]


def test_ctrl_c_after_the_last_step_stops_when_the_loop_ends(default_sigint):
    with pytest.raises(StoppedAfterStep):
        with StopAfterStep(lambda: 7):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopAfterStep(lambda: 0) as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            stop.check()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_first_sigterm_stops_after_the_step_as_terminated_and_the_second_at_once(capfd):
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with pytest.raises(TerminatedAfterStep) as stopped:
            with StopAfterStep(lambda: 5) as stop:
                os.kill(os.getpid(), signal.SIGTERM)  # inside a step: nothing raised there
                with pytest.raises(Terminated) as again:
                    os.kill(os.getpid(), signal.SIGTERM)  # the second: the previous handler, at once
                assert not isinstance(again.value, TerminatedAfterStep)
                stop.check()
        assert stopped.value.step == 5 and isinstance(stopped.value, Terminated)
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        assert "SIGTERM: stopping after this step, keeping a snapshot of it" in capfd.readouterr().err
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_handler_of_another_kind_is_left_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with StopAfterStep(lambda: 0) as stop:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            stop.check()
    finally:
        signal.signal(signal.SIGTERM, previous)

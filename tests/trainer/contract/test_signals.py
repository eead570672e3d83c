"""Signals while a command ends (trainer.contract.signals)."""

from __future__ import annotations

import os
import signal

from trainer.contract.signals import main_to_its_end, signals_held


def test_signals_inside_are_noted_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with signals_held() as noted:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert noted == [signal.SIGINT, signal.SIGTERM]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_ctrl_c_before_main_ends_with_one_line_and_later_signals_are_ignored(capsys):
    def loading_interrupted():
        raise KeyboardInterrupt  # as while the entry point's modules load

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert main_to_its_end(loading_interrupted, "run") == 130
        assert capsys.readouterr().err == "interrupted before the run started\n"
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # a late copy: nothing happens
        assert main_to_its_end(lambda: (lambda: 0), "run") == 0  # main's own status otherwise
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])

"""Interval records: the record at the step the start-up ends holds only start-up steps, and its
rates and step time are over those steps' own time, never over the instant between the start-up's
end and the record (which read as billions of samples per second)."""

from __future__ import annotations

import time

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.train.loop import Trainer
from trainer.train.records import Interval


def _interval(**fields) -> Interval:
    return Interval(torch.zeros(()), torch.zeros(()), **fields)


def test_an_interval_of_start_up_steps_only_is_timed_from_before_the_start_up():
    now = time.perf_counter()
    startup = _interval(t0=now, steps=1, untimed=1, startup_t0=now - 50.0)  # the clock restarted just now
    assert startup.startup_only and startup.timed == 1
    assert startup.elapsed_s() >= 50.0  # the start-up step's own time, not the instant since the restart
    mixed = _interval(t0=now - 2.0, steps=5, untimed=1, startup_t0=now - 50.0)
    assert not mixed.startup_only and mixed.timed == 4
    assert 2.0 <= mixed.elapsed_s() < 50.0  # the timed steps only
    plain = _interval(t0=now - 2.0, steps=3)
    assert not plain.startup_only and plain.timed == 3 and not _interval(t0=now).startup_only


def test_the_record_at_the_end_of_the_start_up_is_marked_and_its_rate_is_its_own(demo_scene):
    records = []
    trainer = Trainer(tiny_config(training__log_every=1), load_scene(demo_scene), None)
    try:
        assert trainer.stepper.startup_steps() == 1
        trainer.train(n_steps=3, on_log=records.append)
    finally:
        trainer.close()
    assert [r["step"] for r in records] == [1, 2, 3]
    first, *rest = records
    assert first["timed_steps"] == 0 and "startup_s" in first  # start-up steps only: marked
    assert [r["timed_steps"] for r in rest] == [1, 1]
    for record in records:  # every rate is the step's samples over the step time the record gives
        assert record["throughput_samples_per_s"] == pytest.approx(
            record["samples_per_step"] * 1e3 / record["step_time_ms"], rel=1e-6)

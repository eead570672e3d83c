"""Sweep objectives (ngptune/tuning/objectives.py) leave out warm-up by the profile's rule
(ngptune.profiling.runs.steady_records): the same records give the same throughput and phase
times as the profile's summary and diagnoses."""

from __future__ import annotations

import pandas as pd
import pytest

from ngptune.profiling.diagnoses import rank_phase_means
from ngptune.profiling.runs import WARMUP_INTERVALS, drop_warmup, phases_table, steady_records, summary_table
from ngptune.tuning.objectives import intermediate_values, mean_phase_ms, objective_value, throughput_samples_per_s
from trainer.contract.metrics import PHASES


def _records(rank: int = 0) -> list[dict]:
    """Rank ``rank``'s records of steps 10..40: a slow first interval (warm-up), then steady ones."""
    out = []
    for i, step in enumerate((10, 20, 30, 40)):
        warm = i == 0
        phases = {f"{p}_ms": (10.0 if warm else 1.0 + j + 0.5 * i) for j, p in enumerate(PHASES)}
        out.append({"rank": rank, "world_size": 2, "step": step, "wall_time_s": step * 0.1,
                    "throughput_samples_per_s": 1000.0 if warm else 4000.0 + 1000 * i + 10 * rank,
                    "step_time_ms": sum(phases.values()) + 2.0, **phases, "other_ms": 2.0})
    return out


def test_the_warm_up_rule() -> None:
    assert WARMUP_INTERVALS == 1
    assert steady_records([10, 20, 30]) == [20, 30]
    assert steady_records([10]) == [10]  # a run with one record keeps it
    assert steady_records([]) == []
    table = pd.DataFrame({"rank": [1, 0, 0, 1, 0, 0], "step": [5, 20, 10, 10, 20, 30], "x": range(6)})
    kept = drop_warmup(table)
    # rank 0 loses step 10 (both rows of step 20 stay), rank 1 loses step 5; order kept within a rank
    assert kept[["rank", "step"]].values.tolist() == [[0, 20], [0, 20], [0, 30], [1, 10]]


def test_objectives_and_the_profile_summary_agree_on_the_same_records() -> None:
    records = _records(0)
    value = throughput_samples_per_s(records)
    assert value == pytest.approx((5000.0 + 6000.0 + 7000.0) / 3)  # the 1000 samples/s warm-up left out
    assert objective_value("throughput_samples_per_s", records, {}) == value
    metrics = pd.DataFrame(records + _records(1))
    summary = summary_table(metrics).set_index("rank")
    assert summary.at[0, "throughput_samples_per_s"] == pytest.approx(value)
    # phase means: the objective's per-phase dict equals the diagnoses' per-rank means
    means = rank_phase_means(phases_table(metrics))
    phases = mean_phase_ms(records)
    assert set(phases) == {*PHASES, "other"}
    for phase, ms in phases.items():
        assert means.at[0, phase] == pytest.approx(ms), phase
    assert phases["data"] == pytest.approx((1.5 + 2.0 + 2.5) / 3)


def test_intermediate_values_follow_the_rule_at_every_record() -> None:
    records = _records(0)
    assert intermediate_values("throughput_samples_per_s", records) == [
        (10, 1000.0), (20, 5000.0), (30, 5500.0), (40, 6000.0)]
    assert throughput_samples_per_s(records[:1]) == 1000.0  # one record: it is all there is

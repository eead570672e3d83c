"""The shipped studies tune for quality: a configuration that wins on samples/s by marching empty
space (occupancy-grid updates switched off: the grid stays occupied, samples per ray triple) and
loses on PSNR is ranked below the default by every shipped study's objectives."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from ngptune.tuning.objectives import objective_value, throughput_only_warning, trial_quality
from ngptune.tuning.outputs import representative_trial
from ngptune.tuning.study import load_study
from tests.support.paths import REPO

STUDIES = sorted((REPO / "studies").glob("*.toml"))


def _run(samples_per_ray: float, occupancy: float, psnr_curve: list[float]) -> tuple[list[dict], dict]:
    """Rank-0 records of a 30 s run (an evaluation every 5 s) at 600 rays/s, and its status."""
    records = []
    for i, psnr_db in enumerate(psnr_curve):
        records.append({"step": 100 * (i + 1), "wall_time_s": 5.0 * (i + 1), "rays_per_step": 1000.0,
                        "samples_per_step": 1000.0 * samples_per_ray, "rays_per_s": 600.0,
                        "throughput_samples_per_s": 600.0 * samples_per_ray, "occupancy_fraction": occupancy,
                        "train_psnr_db": psnr_db, "eval_psnr_db": psnr_db})
    return records, {"state": "completed", "step": records[-1]["step"], "train_time_s": 30.0,
                     "eval_psnr_db": psnr_curve[-1]}


DEFAULT = _run(90.0, 0.15, [20.0, 26.0, 30.0, 33.5, 34.5, 35.0])
OCCUPANCY_OFF = _run(220.0, 0.45, [19.0, 24.0, 28.0, 31.0, 32.5, 33.2])


def _ranked_study(objectives) -> optuna.Study:
    study = optuna.create_study(directions=[o.direction for o in objectives])
    for records, status in (DEFAULT, OCCUPANCY_OFF):
        values = [objective_value(o.name, records, status, target_db=o.target_db) for o in objectives]
        study.add_trial(optuna.trial.create_trial(values=values, params={}, distributions={}))
    return study


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_shipped_objectives_rank_empty_space_marching_below_the_default(path: Path) -> None:
    spec = load_study(path)
    assert spec.objectives[0].name in ("psnr_at_budget_db", "time_to_psnr_s")
    assert throughput_only_warning(spec.objective_names) is None
    assert representative_trial(_ranked_study(spec.objectives)).number == 0  # the default


def test_throughput_alone_prefers_it_and_is_warned_about() -> None:
    assert trial_quality(*OCCUPANCY_OFF)["samples_per_s"] > 2 * trial_quality(*DEFAULT)["samples_per_s"]
    assert trial_quality(*OCCUPANCY_OFF)["samples_per_ray"] == pytest.approx(220.0)

    class Throughput:
        name, direction, target_db = "samples_per_s", "maximize", None

    assert representative_trial(_ranked_study([Throughput])).number == 1
    assert "rewards marching empty space" in throughput_only_warning(["samples_per_s", "rays_per_s"])

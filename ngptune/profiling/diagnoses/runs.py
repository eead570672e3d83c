"""The diagnoses of a run directory from its files alone (every rank's metrics, ``config.json``,
``eval.json``): a sweep's trials, or a run without a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ngptune.profiling.diagnoses.assess import assess, diagnose
from ngptune.profiling.diagnoses.checks import Check, Diagnosis, DiagnosisError
from ngptune.profiling.diagnoses.inputs import OCCUPANCY_REQUIRED, ProfileInputs
from trainer.contract import EvaluationError, RunDir, TrainConfig, load_config, read_evaluation

__all__ = ["assess_run", "config_of_run", "diagnose_run", "evaluation_of_run", "inputs_from_run", "occupancy_records"]


def inputs_from_run(run_dir: Path) -> ProfileInputs:
    """:class:`ProfileInputs` from a run directory's metrics files (all ranks), its ``config.json``
    (:func:`config_of_run`) and its ``eval.json`` when there is one (:func:`evaluation_of_run`). The GPU timeline, kernels,
    overlap and link bandwidth are absent: those parts are not evaluated.

    Raises:
        DiagnosisError: a rank of the run's world size wrote no metrics file.
        ConfigError: the run's config.json is invalid (naming it).
        ngptune.profiling.runs.ProfileError, trainer.contract.metrics.MetricsError: no or corrupt metrics
            (naming the file).
    """
    from ngptune.profiling.runs import metrics_frame, phases_table, summary_table
    metrics = metrics_frame(run_dir)
    world_size = int(metrics["world_size"].max())
    missing = sorted(set(range(world_size)) - set(metrics["rank"]))
    if missing:
        paths = ", ".join(str(RunDir(run_dir).metrics_path(r)) for r in missing)
        raise DiagnosisError(f"{run_dir}: world size {world_size} but ranks {missing} wrote no metrics ({paths})")
    return ProfileInputs(phases=phases_table(metrics), summary=summary_table(metrics),
                         occupancy=occupancy_records(metrics), evaluation=evaluation_of_run(run_dir),
                         config=config_of_run(run_dir))


def evaluation_of_run(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's ``eval.json`` as a dict, or None when the run was not evaluated.

    Raises:
        DiagnosisError: the file is not a JSON object (naming it).
    """
    try:
        return read_evaluation(run_dir)
    except EvaluationError as exc:
        raise DiagnosisError(str(exc)) from exc


def occupancy_records(metrics: pd.DataFrame) -> pd.DataFrame:
    """Rank 0's records of a run's metrics frame (:func:`ngptune.profiling.runs.metrics_frame`), in
    step order, with the :data:`OCCUPANCY_REQUIRED` columns (NaN where the trainer logged none)."""
    rank0 = metrics[metrics["rank"] == 0].sort_values("step")
    return rank0.reindex(columns=list(OCCUPANCY_REQUIRED)).reset_index(drop=True)


def config_of_run(run_dir: Path) -> TrainConfig | None:
    """The run directory's resolved ``config.json``, or None when it has none.

    Raises:
        ConfigError: the file is not a valid trainer config (naming it).
    """
    path = RunDir(run_dir).config_path
    return load_config(path) if path.is_file() else None


def diagnose_run(run_dir: Path) -> list[Diagnosis]:
    """Diagnoses of a run from its metrics files alone (all ranks); used per sweep trial
    (:func:`assess_run` gives every check, fired or not).

    Raises:
        see :func:`inputs_from_run`.
    """
    return diagnose(inputs_from_run(run_dir))


def assess_run(run_dir: Path) -> list[Check]:
    """:func:`assess` of a run from its metrics files alone (all ranks).

    Raises:
        see :func:`inputs_from_run`.
    """
    return assess(inputs_from_run(run_dir))

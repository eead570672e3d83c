"""The lines ``ngptune sweep`` prints while it runs, as parts for
:func:`trainer.contract.fit_lines` (printed by :func:`ngptune.console.print_lines`, each line
under 80 columns): the study's first line, each trial's start and end, the confirmation's start
and each re-run's end. Values carry their unit at the precision they are read at
(:func:`trainer.contract.quantity_text`: ``19.31 dB``, ``12.3 s``, ``10.4 steps/s``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.contract import counted, listed, quantity_text

__all__ = ["confirmation_heading", "rerun_line", "study_heading", "trial_end_line", "trial_start_line"]


def study_heading(name: str, study_file: str, trials: int, budget: str, nproc: int, backend: str, scene: str,
                  storage: str, *, resumed: int | None = None, at_once: int = 1,
                  retried: Sequence[int] = ()) -> list[str]:
    """The parts of a sweep's first line: the study, its file, the trials aimed at, their budget
    (``StudyBudget.describe()``), ranks, backend, scene, storage; ``resumed``: the trials done or
    running in a loaded study (None for a new one); the trials run at once; the trials retried."""
    parts = [f"study {name}", f"({study_file}):", f"{counted(trials, 'trial')} of {budget}",
             f"on {counted(nproc, 'rank')} ({backend});", f"scene {scene};", f"storage {storage}"]
    if resumed is not None:
        parts[-1] += ";"
        parts += ([f"resuming with {resumed} of {trials} trials done or running"] if resumed < trials
                  else [f"resuming: {counted(resumed, 'trial')} done,", "no more to run", "(--trials N for more)"])
    if at_once > 1:
        parts[-1] += ";"
        parts.append(f"{at_once} trials at once")
    if retried:
        parts[-1] += ";"
        parts += [f"retrying trial{'s' if len(retried) > 1 else ''}", *listed([str(n) for n in retried])]
    return parts


def confirmation_heading(candidate: int, default: int, repeats: int, budget: str, won: bool,
                         reused: int = 0, asked: int | None = None) -> list[str]:
    """The parts of the line that starts a confirmation: the candidate (``won``: the runner-up,
    the default having won its single run) and the default trial, re-runs of each and their budget,
    how many of those re-runs an earlier sweep recorded (``reused``; none: not said), and that
    ``--confirm-runs`` asked for fewer (``asked`` below ``repeats``: every recorded pair counts)."""
    which = "(the runner-up: the default won its single run)" if won else "(the best)"
    parts = ["confirmation:", f"trial {candidate} {which}", f"and default trial {default},",
             f"{counted(repeats, 're-run')} each", f"of {budget}", "with new seeds, alternating"]
    if reused:
        parts += [f"({reused} of them", "recorded earlier", "and reused)"]
    if asked is not None and asked < repeats:
        parts += [f"(--confirm-runs {asked} asks fewer:", "every pair recorded earlier counts)"]
    return parts


def rerun_line(run: Any, objective: str) -> list[str]:
    """The parts of the line a confirmation re-run ends with (``run``: a
    :class:`~ngptune.tuning.confirm.ConfirmRun`): its index, trial, seed and outcome, the
    objective's value, the PSNR, the reason of a failure. Starts with two spaces."""
    which = "the default" if run.label == "default" else "the candidate"
    parts = [f"  re-run {run.index} of trial {run.trial}", f"({which}, seed {run.seed}):", f"{run.outcome},"]
    if run.value is None:
        parts.append("no value")
    elif objective == "psnr_at_budget_db":
        parts.append(f"PSNR {quantity_text(objective, run.value)}")
    else:
        parts.append(f"{objective} = {quantity_text(objective, run.value)}")
        psnr_db = (run.quality or {}).get("psnr_db")
        if psnr_db is not None:
            parts[-1] += ","
            parts.append(f"PSNR {quantity_text('psnr_db', psnr_db)}")
    if run.reason:
        parts[-1] += " —"
        parts.append(run.reason)
    return parts


def trial_start_line(number: int, is_default: bool, values: Mapping[str, Any]) -> list[str]:
    """The parts of the line a trial starts with: its number and the settings it samples
    (``name=value``), or ``base settings``."""
    head = f"trial {number}{' (default)' if is_default else ''}:"
    return [head, *listed([f"{k}={v}" for k, v in values.items()])] if values else [head, "base settings"]


def trial_end_line(number: int, outcome: str, duration_s: float, objectives: Mapping[str, float | None],
                   quality: Mapping[str, Any], reason: str = "") -> list[str]:
    """The parts of the line a trial ends with: its outcome and duration (the trial's wall time,
    start-up and evaluation included, with its seconds of training beside it when the run recorded
    them); for a completed trial its objectives' values, the PSNR (unless an objective is it),
    steps and steps/s; the reason."""
    parts = [f"trial {number}: {outcome}", f"in {quantity_text('duration_s', duration_s)}"]
    if isinstance(quality.get("train_time_s"), (int, float)):
        parts += [f"({quantity_text('train_time_s', quality['train_time_s'])}", "of training)"]
    shown = [f"{k} = {quantity_text(k, v)}" for k, v in objectives.items() if v is not None]
    if outcome == "completed" and shown:
        if quality.get("psnr_db") is not None and "psnr_at_budget_db" not in objectives:
            shown.append(f"PSNR {quantity_text('psnr_db', quality['psnr_db'])}")
        parts[-1] += ":"
        parts += listed(shown)
        if quality.get("steps") is not None and quality.get("steps_per_s") is not None:
            parts += [f"({counted(int(quality['steps']), 'step')},",
                      f"{quantity_text('steps_per_s', quality['steps_per_s'])})"]
    if reason:
        parts[-1] += " —"
        parts.append(reason)
    return parts

"""One trial of a sweep as Optuna's objective (:class:`TrialObjective`): sample its settings, check
the combination (an invalid one is pruned before launch), write its config, launch ``python -m
trainer --nproc-per-node N`` on a slot of GPUs (:mod:`ngptune.tuning.trial`), report intermediate
values to the pruner, and record the user attributes the report reads (:mod:`ngptune.tuning.sweep`
lists them); its diagnoses from its metrics (:func:`trial_diagnoses`)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from ngptune.console import print_lines
from ngptune.errors import USER_ERRORS, TrialFailed
from ngptune.tuning import nccl
from ngptune.tuning.concurrency import TrialSlots
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.lines import trial_end_line, trial_start_line
from ngptune.tuning.retries import INFRASTRUCTURE_ATTR
from ngptune.tuning.objectives import (
    OBJECTIVES, TargetNotReached, intermediate_values, mean_phase_ms, objective_value, trial_quality,
)
from ngptune.tuning.space import check_combination, default_params, sample, split_values, trial_config
from ngptune.tuning.specs import StudySpec
from ngptune.tuning.storage import UNTUNED_ATTR, worker_id
from ngptune.tuning.trial import TrialLaunch, run_trial, trial_argv
from trainer.contract import (
    ConfigError, RunDir, TrainConfig, atomic_write_text, derived_settings_of, dump_config, listed,
)

__all__ = ["TrialObjective", "trial_diagnoses"]


class TrialObjective:
    """The Optuna objective: one trial as a launch of the trainer (module docstring)."""

    def __init__(self, *, spec: StudySpec, base_cfg: TrainConfig, scene: str, nproc_per_node: int,
                 nccl_active: bool, study_dir: StudyDir, console: Console, poll_s: float, slots: TrialSlots) -> None:
        self.spec = spec
        self.base_cfg = base_cfg
        self.scene = scene
        self.nproc = nproc_per_node
        self.nccl_active = nccl_active
        self.study_dir = study_dir
        self.console = console
        self.poll_s = poll_s
        self.slots = slots
        self.worker = worker_id()
        self.default_names = set(default_params(spec, base_cfg))

    def __call__(self, trial) -> float | list[float]:
        trial.set_user_attr("worker", self.worker)
        # What a killed sweep leaves behind; replaced when the trial ends.
        trial.set_user_attr("outcome", "failed")
        trial.set_user_attr("reason", "the sweep stopped before this trial finished")
        trial.set_user_attr("interrupted", False)  # a retry inherits its original's attributes
        untuned = trial.user_attrs.get(UNTUNED_ATTR) is True
        if not untuned:
            trial.set_user_attr("is_default", False)
        try:
            return self._run(trial, untuned)
        except KeyboardInterrupt:
            trial.set_user_attr("is_default", False)  # the retry is the default trial
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("reason", "interrupted: the sweep was stopped during this trial (it is retried on the next run)")
            raise

    def _pruning_hook(self, trial, prunable: bool = True):
        """Report intermediate values of a single objective; a reason when the pruner says stop
        (never for a trial that is not ``prunable``: the default)."""
        if len(self.spec.objectives) != 1 or not OBJECTIVES[self.spec.objectives[0].name].has_intermediate:
            return None
        name = self.spec.objectives[0].name
        marks = self.spec.pruner.has_marks
        per_second = marks and self.spec.budget.seconds is not None  # the pruner's resource: the budget's unit
        at_rungs = self.spec.pruner.eval_at_s is not None
        unit = "s of training" if per_second else "step"
        reported: set[int] = set()

        def on_progress(records: list[dict[str, Any]]) -> str | None:
            for step, value in intermediate_values(name, records, evaluations=marks, per_second=per_second,
                                                     at_marks=at_rungs):
                if step in reported:
                    continue
                trial.report(value, step)
                reported.add(step)
                # asked for the default too: the pruner records its rungs then, and compares the others with them
                if trial.should_prune() and prunable:
                    pruner = type(trial.study.pruner).__name__
                    what = "PSNR of the evaluation marks" if marks else f"{name}"
                    where = f"{step} {unit}" if per_second else f"step {step}"
                    return f"pruned by {pruner} at {where} ({what} = {value:.4g})"
            return None

        return on_progress

    def _objective_values(self, run) -> tuple[dict[str, float | None], str | None]:
        """Each objective's value (None where the run has none), and why a PSNR target was missed."""
        values: dict[str, float | None] = {}
        missed = None
        for objective in self.spec.objectives:
            try:
                values[objective.name] = objective_value(objective.name, run.records, run.status or {},
                                                         target_db=objective.target_db)
            except TargetNotReached as exc:
                values[objective.name], missed = None, str(exc)
        return values, missed

    def _run(self, trial, is_default: bool) -> float | list[float]:
        number = trial.number
        values = sample(trial, self.spec, nccl_active=self.nccl_active, only=self.default_names if is_default else None)
        trainer_values, nccl_sampled = split_values(values)
        nccl_env = dict(nccl.FORCED)
        if self.nccl_active:
            nccl_env.update({k: str(v) for k, v in self.spec.nccl_settings.items()})
            nccl_env.update(nccl_sampled)
        run_dir = self.study_dir.run_dir(number)
        config_path = self.study_dir.config_path(number)
        log_path = self.study_dir.launch_log_path(number)
        attrs: dict[str, Any] = {
            "is_default": is_default,
            "run_dir": str(run_dir),
            "config_path": str(config_path),
            "log_path": str(log_path),
            "settings": {**self.spec.fixed_overrides(), **trainer_values},
            "nccl_env": nccl_env,
            "nccl_applied": {},
            "nccl_active": self.nccl_active,
            "emulated_interconnect": self.base_cfg.distributed.emulate_interconnect,
            "objectives": {o.name: None for o in self.spec.objectives},
            "phase_ms": {},
            "quality": {},
            "derived_settings": {},  # the values the run chose for the config's nulls (status.json)
            "diagnoses": [],
            "diagnoses_note": "the trial did not complete",
            "duration_s": 0.0,
            "gpus": [],
            "trials_per_gpu": self.slots.trials_per_gpu,
            INFRASTRUCTURE_ATTR: False,
        }
        print_lines(self.console, trial_start_line(number, is_default, values), marks=[(f"trial {number}", "bold")])
        try:
            cfg = trial_config(self.base_cfg, trainer_values, self.scene)
            attrs["emulated_interconnect"] = cfg.distributed.emulate_interconnect
            check_combination(cfg, nccl_env, self.nproc, self.nccl_active)
        except ConfigError as exc:
            return self._finish(trial, attrs, "pruned", f"invalid combination: {exc}", None)
        config_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(config_path, dump_config(cfg) + "\n")
        launch = TrialLaunch(
            argv=trial_argv(config_path, run_dir, self.nproc, evaluate=True),  # every trial is scored on PSNR
            env=nccl.trial_env(os.environ, nccl_env, nccl_active=self.nccl_active),
            run_dir=run_dir,
            log_path=log_path,
            world_size=self.nproc,
            timeout_s=self.spec.budget.trial_timeout_s,
            poll_s=self.poll_s,
        )
        run = self._run_on_slot(trial, attrs, launch)
        rundir = RunDir(run_dir)
        attrs["duration_s"] = run.duration_s
        attrs["phase_ms"] = mean_phase_ms(run.records)
        attrs["quality"] = trial_quality(run.records, run.status or {})
        attrs["derived_settings"] = derived_settings_of(run.status)
        if self.nccl_active:
            attrs["nccl_applied"] = nccl.parse_applied(rundir.log_path(r) for r in range(self.nproc))
        attrs["objectives"], missed = self._objective_values(run)
        attrs[INFRASTRUCTURE_ATTR] = run.infrastructure
        if run.leftover_pids:
            attrs["leftover_pids"] = run.leftover_pids
            print_lines(self.console, [f"trial {number}: processes", *listed([str(p) for p in run.leftover_pids]),
                                       "survived SIGKILL"], style="red")
        outcome, reason = run.outcome, run.reason
        if outcome == "completed":
            absent = [name for name, value in attrs["objectives"].items() if value is None]
            if missed is not None:
                outcome, reason = "pruned", missed
            elif absent:
                outcome, reason = "failed", f"the run completed without a value for {', '.join(absent)}"
            attrs["diagnoses"], attrs["diagnoses_note"] = trial_diagnoses(run_dir)
        return self._finish(trial, attrs, outcome, reason, list(attrs["objectives"].values()))

    def _run_on_slot(self, trial, attrs: dict[str, Any], launch: TrialLaunch):
        """Claim GPUs, run the trial on them (``CUDA_VISIBLE_DEVICES``), free them at once; GPUs of
        a trial that left processes behind stay claimed by those processes."""
        slot = self.slots.pool.claim(stop=self.slots.stop)
        if slot is None:
            raise KeyboardInterrupt("the sweep stopped before this trial got its GPUs")
        attrs["gpus"] = slot.gpus
        trial.set_user_attr("gpus", slot.gpus)
        claimed = time.time()
        leftover: list[int] = []
        try:
            # the default reports its intermediate values (the pruner compares the others with them) and
            # always runs to its end
            hook = self._pruning_hook(trial, prunable=not attrs["is_default"])
            run = run_trial(dataclasses.replace(launch, env=slot.env(launch.env)), hook)
            leftover = run.leftover_pids
            return run
        finally:
            self.slots.pool.release(slot, leftover)
            attrs["gpus_held_unix_s"] = [claimed, time.time()]

    def _finish(self, trial, attrs: dict[str, Any], outcome: str, reason: str, values: list | None):
        import optuna

        attrs.update(outcome=outcome, reason=reason)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        colour = {"completed": "green", "pruned": "yellow", "failed": "red"}[outcome]
        print_lines(self.console, trial_end_line(trial.number, outcome, attrs["duration_s"], attrs["objectives"],
                                                 attrs.get("quality", {}), reason),
                    marks=[(outcome, colour)])
        if outcome == "pruned":
            raise optuna.TrialPruned(reason)
        if outcome == "failed":
            raise TrialFailed(reason)
        return values[0] if len(values) == 1 else values


def trial_diagnoses(run_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """The bottleneck diagnoses of a completed trial, from its metrics files
    (:func:`ngptune.profiling.diagnoses.assess_run`), and a note saying what was checked (or why
    nothing could be)."""
    from ngptune.profiling.diagnoses import assess_run

    try:
        checks = assess_run(run_dir)
    except USER_ERRORS as exc:
        return [], f"not diagnosed: {exc}"
    found = [c.diagnosis for c in checks if c.diagnosis is not None]
    clear = [c.bottleneck for c in checks if c.status == "clear"]
    skipped = [c.bottleneck for c in checks if c.status == "not_evaluated"]
    note = (f"checked from metrics: {len(found)} fired, clear: {', '.join(clear) or 'none'}; "
            f"not evaluated (needs a profile, several ranks or an evaluation past the occupancy warm-up): {', '.join(skipped) or 'none'}")
    return [{"bottleneck": d.bottleneck, "severity": d.severity, "evidence": d.evidence, "knob": d.knob}
            for d in found], note

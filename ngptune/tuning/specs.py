"""The parts of a loaded study (:func:`ngptune.tuning.study.load_study` reads and validates the
file): searched parameters, objectives, budget, sampler, pruner, and the whole study."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from ngptune.tuning import nccl
from ngptune.tuning.objectives import OBJECTIVES
from trainer.contract import TrainConfig, apply_overrides, config_to_dict, load_config

__all__ = ["BUDGET_STEPS_CAP", "BudgetSpec", "ObjectiveSpec", "ParamSpec", "PrunerSpec", "SamplerSpec", "StudySpec",
           "definition_fingerprint"]

# training.n_steps of a trial with a time budget: the budget, not the step count, ends it.
BUDGET_STEPS_CAP = 10_000_000


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One searched parameter.

    Attributes:
        name: a dotted trainer key (``training.precision``) or an allow-listed NCCL variable.
        kind: ``"categorical"``, ``"int"`` or ``"float"``.
        choices: the values of a categorical parameter.
        low, high: inclusive bounds of an int / float parameter.
        step: grid step of an int / float parameter, or None (int: 1).
        log: sample on a log scale.
        when: conditions ``(parameter name, allowed values)``; the parameter is sampled only when
            each named (earlier) parameter was sampled with one of its values.
    """

    name: str
    kind: str
    choices: tuple[Any, ...] = ()
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def is_nccl(self) -> bool:
        return nccl.is_nccl_name(self.name)

    def contains(self, value: object) -> bool:
        """Whether ``value`` is one this parameter can take."""
        if self.kind == "categorical":
            return any(type(value) is type(c) and value == c for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is not None:
            k = (value - self.low) / self.step
            return math.isclose(k, round(k), abs_tol=1e-9)
        return True

    def values(self) -> list[Any]:
        """Every value of a categorical or int parameter (a float one has too many: its bounds)."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        return [self.low, self.high]


@dataclasses.dataclass(frozen=True)
class ObjectiveSpec:
    """One objective (see :mod:`ngptune.tuning.objectives`): name and its options."""

    name: str
    target_db: float | None = None  # time_to_psnr_s
    eval_every_steps: int | None = None  # time_to_psnr_s: training.eval_every

    @property
    def direction(self) -> str:
        return OBJECTIVES[self.name].direction


@dataclasses.dataclass(frozen=True)
class BudgetSpec:
    """How long each trial trains (``steps`` or ``seconds``) and when it counts as hung."""

    steps: int | None
    seconds: float | None
    trial_timeout_s: float

    def trainer_overrides(self) -> dict[str, Any]:
        """Trainer settings that impose the budget."""
        if self.seconds is not None:
            return {"training.n_steps": BUDGET_STEPS_CAP, "training.time_budget_s": float(self.seconds)}
        return {"training.n_steps": int(self.steps), "training.time_budget_s": None}

    def describe(self) -> str:
        return f"{self.seconds:g} s of training" if self.seconds is not None else f"{self.steps} steps"


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """The Optuna sampler: ``tpe``, ``random`` or ``nsga2``, seeded (built by
    :func:`ngptune.tuning.samplers.build_sampler`)."""

    type: str = "tpe"
    seed: int = 0
    n_startup_trials: int | None = None
    population_size: int | None = None

@dataclasses.dataclass(frozen=True)
class PrunerSpec:
    """The Optuna pruner: ``median``, ``successive_halving``, ``hyperband`` or ``none`` (built by
    :func:`ngptune.tuning.samplers.build_pruner`), and the evaluation marks it judges.

    Attributes:
        eval_every_steps: the marks: every trial evaluates ``eval_images`` fixed held-out views
            every this many steps (``training.eval_every``) and reports their PSNR to the pruner
            at each mark's step (step budget) or at each whole second of training, interpolated
            between marks (seconds budget); None: the pruner reads the training-batch PSNR of
            each metrics record.
        eval_at_s: the marks at the pruner's rungs instead (study key ``eval_at = "rungs"``, a
            seconds budget): every trial evaluates at the first metrics record at or past each of
            these whole seconds of training (``training.eval_at_s``) and reports the PSNR at that
            whole second; None: no such marks.
        eval_images: views of each mark's evaluation (``training.eval_every_max_images``; None:
            ``training.eval_max_images``).
        min_resource, max_resource, reduction_factor, min_early_stopping_rate: Optuna's
            successive-halving / Hyperband options, in the budget's unit: steps, or with a seconds
            budget and marks whole seconds of training (``max_resource`` "auto": the budget).
    """

    type: str = "none"
    n_startup_trials: int = 2
    n_warmup_steps: int = 0
    interval_steps: int = 1
    min_resource: int | str = 1
    max_resource: int | str = "auto"
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0
    eval_every_steps: int | None = None
    eval_at_s: tuple[int, ...] | None = None
    eval_images: int | None = None

    @property
    def has_marks(self) -> bool:
        """Whether trials evaluate at marks (every N steps, or at the rungs)."""
        return self.eval_every_steps is not None or self.eval_at_s is not None

    def trainer_overrides(self) -> dict[str, Any]:
        """Trainer settings of the evaluation marks (none without marks)."""
        if self.eval_at_s is not None:
            return {"training.eval_at_s": list(self.eval_at_s), "training.eval_every_max_images": self.eval_images}
        if self.eval_every_steps is None:
            return {}
        return {"training.eval_every": int(self.eval_every_steps), "training.eval_every_max_images": self.eval_images}

@dataclasses.dataclass(frozen=True)
class StudySpec:
    """A loaded, validated study file.

    Attributes:
        path: the study file.
        name: the study's default name.
        scene: ``"demo"`` or the scene path (absolute).
        base_config_path: the base trainer config, or None for the trainer's defaults.
        settings: fixed trainer settings, dotted key → value.
        nccl_settings: fixed NCCL variables, name → value (allow-listed).
        params: the search space, in file order.
        objectives: one or more objectives, in file order (the study's value order).
        budget, sampler, pruner: as in the file.
        trials: the number of finished trials the study aims at.
        timeout_s: stop starting trials after this many seconds, or None.
    """

    path: Path
    name: str
    scene: str
    base_config_path: Path | None
    settings: dict[str, Any]
    nccl_settings: dict[str, Any]
    params: tuple[ParamSpec, ...]
    objectives: tuple[ObjectiveSpec, ...]
    budget: BudgetSpec
    sampler: SamplerSpec
    pruner: PrunerSpec
    trials: int
    timeout_s: float | None

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def objective_names(self) -> list[str]:
        return [o.name for o in self.objectives]

    @property
    def needs_eval(self) -> bool:
        """Whether a trial must run the trainer's final evaluation."""
        return any(OBJECTIVES[o.name].needs_eval for o in self.objectives)

    def fixed_overrides(self) -> dict[str, Any]:
        """Trainer settings every trial gets: the fixed settings, the budget, objective options."""
        overrides = dict(self.settings)
        overrides.update(self.budget.trainer_overrides())
        overrides.update(self.pruner.trainer_overrides())
        if self.objective_eval_every is not None:
            overrides["training.eval_every"] = self.objective_eval_every
        return overrides

    @property
    def objective_eval_every(self) -> int | None:
        """The evaluation marks an objective reads (``time_to_psnr_s``'s ``eval_every_steps``), or
        None: the one objective that has them (names are unique)."""
        return next((o.eval_every_steps for o in self.objectives if o.eval_every_steps is not None), None)

    def rerun_overrides(self, seed: int) -> dict[str, Any]:
        """Settings a confirmation re-run puts over its trial's config: the new ``seed`` and no
        pruner marks (``training.eval_every`` 0, or an objective's own marks such as
        ``time_to_psnr_s``'s; no ``training.eval_at_s``): nothing prunes a re-run, and each mark
        is an evaluation outside the training clock but inside its wall time (2 fox views at
        1080x1920 take ~2.3 s on an H100, 13 marks in a 60 s trial)."""
        return {"training.seed": int(seed), "training.eval_every": int(self.objective_eval_every or 0),
                "training.eval_at_s": []}

    def base_config(self) -> TrainConfig:
        """The base trainer config with :meth:`fixed_overrides` applied (the untuned default)."""
        return apply_overrides(load_config(self.base_config_path), self.fixed_overrides())

    def definition(self, scene_path: str, nproc_per_node: int) -> dict[str, Any]:
        """What defines a trial, as JSON-ready data: the base config with the fixed settings and
        the budget, the scene, the world size, the NCCL settings, the space and the objectives."""
        payload = {
            "config": config_to_dict(self.base_config()),
            "scene": scene_path,
            "nproc_per_node": nproc_per_node,
            "nccl_settings": self.nccl_settings,
            "params": [dataclasses.asdict(p) for p in self.params],
            "objectives": [dataclasses.asdict(o) for o in self.objectives],
        }
        return json.loads(json.dumps(payload, sort_keys=True, default=str))

    def fingerprint(self, scene_path: str, nproc_per_node: int) -> str:
        """SHA-256 of :meth:`definition`: a study resumed with another definition is refused."""
        return definition_fingerprint(self.definition(scene_path, nproc_per_node))


def definition_fingerprint(definition: dict[str, Any]) -> str:
    """SHA-256 of a study definition (:meth:`StudySpec.definition`, JSON-ready data)."""
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()

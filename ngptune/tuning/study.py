"""Study files: what one ``ngptune sweep`` tunes, how, and towards what (DESIGN.md §5); this
module reads and validates them into the parts of :mod:`ngptune.tuning.specs`.

A study file is TOML (``studies/*.toml``; read with :mod:`tomllib`)::

    [study]
    name = "demo"                  # default --study-name (letters, digits, . _ -); default: file stem
    scene = "demo"                 # "demo" (the built-in scene, cached) or a scene path
    config = "configs/small.json"  # base trainer config; default: the trainer's defaults
    trials = 6                     # finished trials the study aims at (--trials overrides)
    timeout_s = 900                # optional: stop starting trials after this long (--timeout)

    [settings]                     # fixed trainer settings, dotted keys (also as nested tables)
    "training.log_every" = 5
    NCCL_ALGO = "Ring"             # fixed NCCL variables: allow-listed values only (ngptune.tuning.nccl)

    [budget]                       # exactly one of steps / seconds
    seconds = 6                    # training.time_budget_s (training.n_steps becomes a large cap)
    trial_timeout_s = 90           # a trial still running after this long is killed: failed (hang)

    [sampler]
    type = "tpe"                   # tpe | random | nsga2
    seed = 7
    n_startup_trials = 3           # tpe only; population_size: nsga2 only

    [pruner]
    type = "hyperband"             # median | successive_halving | hyperband | none (none with several objectives)
    min_resource = 20              # median: n_startup_trials, n_warmup_steps, interval_steps
                                   # successive_halving: min_resource, reduction_factor, min_early_stopping_rate
                                   # hyperband: min_resource, max_resource ("auto": budget.steps), reduction_factor
    eval_every_steps = 20          # the marks: PSNR of eval_images fixed held-out views every 20 steps
    eval_images = 2                # (psnr_at_budget_db only); without marks: the training-batch PSNR

    [[objectives]]
    name = "psnr_at_budget_db"             # PSNR after the budget (steps or seconds); or time_to_psnr_s
                                           # (target_db, eval_every_steps), steps_per_s, samples_per_s,
                                           # throughput_samples_per_s, rays_per_s

    [params."parallel.mode"]
    type = "categorical"
    choices = ["data", "subgrid"]

    [params."parallel.num_subgrids"]       # conditional: only sampled when parallel.mode is subgrid
    type = "int"                           # int | float: low, high, step, log
    low = 2
    high = 4
    when = { "parallel.mode" = "subgrid" } # values: one or a list; keys: parameters defined above

    [params.NCCL_ALGO]                     # NCCL variables: allow-list only; inactive on gloo
    type = "categorical"
    choices = ["Ring", "Tree"]

Relative paths (``scene``, ``config``) are looked up next to the study file first, then in the
repository root (where ``configs/`` and ``studies/`` live). Every value is checked when the file
is loaded: trainer settings and parameter values through the trainer's own config rules
(:func:`trainer.contract.config.apply_overrides`), NCCL ones against the allow-list. Errors are
:class:`~trainer.contract.errors.ConfigError` with one line naming the study file and the dotted key, e.g.
``studies/x.toml: params.NCCL_PROTO.choices[2]: NCCL_PROTO=LL128 is never forced ...``.

Checks between a parameter and other values (``parallel.num_subgrids`` below the world size, a
value the trainer rejects only in combination) are made per trial: such a trial is pruned as an
invalid combination before anything is launched.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ngptune.tuning import nccl
from ngptune.tuning.objectives import OBJECTIVES
from ngptune.tuning.specs import (
    BUDGET_STEPS_CAP, BudgetSpec, ObjectiveSpec, ParamSpec, PrunerSpec, SamplerSpec, StudySpec,
)
from trainer.contract import (
    ConfigError,
    TrainConfig,
    apply_overrides,
    field_rule,
    is_int,
    is_number,
    load_config,
    show_value,
)

__all__ = [
    "BUDGET_STEPS_CAP",
    "BudgetSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "PrunerSpec",
    "MAX_TRIALS",
    "REPO_ROOT",
    "STUDY_NAME_RULE",
    "SamplerSpec",
    "StudySpec",
    "is_study_name",
    "load_study",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_SCENE = "demo"
DEFAULT_TRIALS = 20
MAX_TRIALS = 10**6  # study.trials and --trials: more is a typo, not a study
DEFAULT_EVAL_EVERY_STEPS = 50
# Keys a sweep controls itself and a study may not set: why not.
_RESERVED_KEYS = {
    "training.n_steps": "set by the budget (budget.steps)",
    "training.time_budget_s": "set by the budget (budget.seconds)",
    "data.scene": "set by study.scene (or --scene)",
    "distributed.world_size": "set by --nproc-per-node",
    "distributed.master_port": "every trial's launcher picks a free rendezvous port",
}
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
STUDY_NAME_RULE = "a name of letters, digits, '.', '_' or '-'"
_MAX_CHECKED_VALUES = 4096  # int parameters with fewer values have each value checked at load
_MAX_CHECKED_COMBINATIONS = 512  # of other parameters' values, tried for each value at load


def is_study_name(value: object) -> bool:
    """Whether ``value`` is a valid study name (``study.name``, ``--study-name``): a non-empty
    string of letters, digits, ``.``, ``_`` and ``-`` (it names a folder and appears in shell and
    HTML files)."""
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


class _Reader:
    """Builds errors that name the study file and the dotted key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {problem}")

    def table(self, data: Mapping, key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {show_value(value)}")
        return value

    def only(self, table: Mapping, where: str, allowed: list[str]) -> None:
        for key in table:
            if key not in allowed:
                dotted = f"{where}.{key}" if where else key
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(allowed)}"
                raise ConfigError(f"{self.path}: unknown key {dotted!r} ({hint})")

    def value(self, table: Mapping, where: str, key: str, check, description: str, default: Any = None) -> Any:
        if key not in table:
            return default
        value = table[key]
        if not check(value):
            raise self.error(f"{where}.{key}", f"expected {description}, got {show_value(value)}")
        return value


def _resolve_path(reader: _Reader, key: str, text: str) -> Path:
    """A path from the study file: absolute, else next to the study file, else in the repo root."""
    path = Path(text).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [reader.path.parent / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    tried = " or ".join(str(c) for c in candidates)
    raise reader.error(key, f"{text!r} not found (looked for {tried})")


def _flatten(table: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested tables → dotted keys (``[settings.training] log_every = 5`` → ``training.log_every``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and not nccl.is_nccl_name(dotted):
            out.update(_flatten(value, prefix=f"{dotted}."))
        else:
            out[dotted] = value
    return out


def _config_problem(cfg: TrainConfig, key: str, value: object) -> str | None:
    """The trainer's complaint about ``key`` taking ``value`` (None if accepted).

    Only the key's own rule counts (:func:`trainer.contract.config.field_rule`); checks between keys depend
    on the combination and are made per trial. Unknown keys get the trainer's message with its
    did-you-mean suggestion.
    """
    rule = field_rule(key)
    try:
        if rule is not None:
            rule.from_json(key, value)
        else:
            apply_overrides(cfg, {key: value})
    except ConfigError as exc:
        message = str(exc).removeprefix("overrides: ")
        return message if rule is None else message.removeprefix(f"{key}:").strip()
    return None


def _non_numeric_values(key: str) -> str | None:
    """What the config field ``key`` (``block.name``) takes when that is not a number: ``a string
    (one of ...)`` or ``true or false``; None for a numeric field."""
    rule = field_rule(key)
    if rule.value_type is str:
        return f"a string (one of {', '.join(map(str, rule.choices))})" if rule.choices else "a string"
    if rule.value_type is bool:
        return "true or false"
    return None


def _check_reserved(reader: _Reader, where: str, key: str) -> None:
    if key in _RESERVED_KEYS:
        raise reader.error(where, f"{key} cannot be set in a study: {_RESERVED_KEYS[key]}")


def _read_settings(reader: _Reader, data: Mapping, cfg: TrainConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    flat = _flatten(reader.table(data, "settings"))
    settings: dict[str, Any] = {}
    nccl_settings: dict[str, Any] = {}
    for key, value in flat.items():
        where = f"settings.{key}"
        if nccl.is_nccl_name(key):
            if key in nccl.FORCED and str(value) == nccl.FORCED[key]:
                continue  # the trial sets it anyway
            try:
                nccl.check_nccl_value(key, value)
            except nccl.NcclValueError as exc:
                raise reader.error(where, str(exc)) from None
            nccl_settings[key] = value
            continue
        _check_reserved(reader, where, key)
        settings[key] = value
    try:
        apply_overrides(cfg, settings)
    except ConfigError as exc:
        message = str(exc).removeprefix("overrides: ")
        named = message.split(":", 1)[0]
        raise ConfigError(f"{reader.path}: settings{'.' if named in settings else ': '}{message}") from None
    return settings, nccl_settings


def _check_param_value(reader: _Reader, where: str, name: str, value: object, cfg: TrainConfig) -> None:
    if nccl.is_nccl_name(name):
        try:
            nccl.check_nccl_value(name, value)
        except nccl.NcclValueError as exc:
            raise reader.error(where, str(exc)) from None
        return
    problem = _config_problem(cfg, name, value)
    if problem is not None:
        raise reader.error(where, problem)


def _read_param(reader: _Reader, name: str, table: Mapping, cfg: TrainConfig, earlier: dict[str, ParamSpec]) -> ParamSpec:
    where = f"params.{name}"
    if nccl.is_nccl_name(name):
        try:
            nccl.check_nccl_name(name)
        except nccl.NcclValueError as exc:
            raise reader.error(where, str(exc)) from None
    else:
        _check_reserved(reader, where, name)
        if field_rule(name) is None:
            raise ConfigError(f"{reader.path}: {where}: {_config_problem(cfg, name, None)}")
    kind = table.get("type")
    if kind not in ("categorical", "int", "float"):
        raise reader.error(f"{where}.type", f"expected one of categorical, int, float, got {show_value(kind)}")
    takes = None if nccl.is_nccl_name(name) else _non_numeric_values(name)
    if kind in ("int", "float") and takes is not None:
        raise reader.error(f"{where}.type", f"{name} takes {takes}, not {'integers' if kind == 'int' else 'numbers'}; "
                                            'use type = "categorical" with a list of choices')
    common = ["type", "when"]
    if kind == "categorical":
        reader.only(table, where, [*common, "choices"])
        choices = table.get("choices")
        if not isinstance(choices, list) or not choices:
            raise reader.error(f"{where}.choices", f"expected a non-empty list, got {show_value(choices)}")
        for i, choice in enumerate(choices):
            if not isinstance(choice, (str, int, float, bool)):
                raise reader.error(f"{where}.choices[{i}]", f"expected a string, number or boolean, got {show_value(choice)}")
            if any(type(choice) is type(c) and choice == c for c in choices[:i]):
                raise reader.error(f"{where}.choices[{i}]", f"duplicate choice {show_value(choice)}")
            _check_param_value(reader, f"{where}.choices[{i}]", name, choice, cfg)
        spec = ParamSpec(name, kind, choices=tuple(choices))
    else:
        reader.only(table, where, [*common, "low", "high", "step", "log"])
        number = is_int if kind == "int" else is_number
        what = "an integer" if kind == "int" else "a number"
        for key in ("low", "high"):
            if key not in table:
                raise reader.error(where, f"missing key {key!r}")
        low = reader.value(table, where, "low", number, what)
        high = reader.value(table, where, "high", number, what)
        if high < low:
            raise reader.error(f"{where}.high", f"expected {what} >= low ({low}), got {high}")
        step = reader.value(table, where, "step", lambda v: number(v) and v > 0, f"{what} > 0")
        log = reader.value(table, where, "log", lambda v: isinstance(v, bool), "true or false", default=False)
        if log and step is not None and step != 1:
            raise reader.error(f"{where}.log", "a log scale cannot have a step")
        if log and low <= 0:
            raise reader.error(f"{where}.low", f"expected a value > 0 on a log scale, got {low}")
        if kind == "float" and nccl.is_nccl_name(name):
            raise reader.error(f"{where}.type", f"{name} takes integers or names, not floats")
        spec = ParamSpec(name, kind, low=low, high=high, step=step, log=log)
        _check_param_value(reader, f"{where}.low", name, low, cfg)
        _check_param_value(reader, f"{where}.high", name, high, cfg)
        if kind == "int" and (nccl.is_nccl_name(name) or (high - low) // (step or 1) < _MAX_CHECKED_VALUES):
            # e.g. multiples of 16, powers of two between the bounds (NCCL: stops at the first
            # value off the allow-list, which has at most 32 values)
            for value in range(low, high + 1, step or 1):
                _check_param_value(reader, where, name, value, cfg)
    when = _read_when(reader, where, table.get("when"), earlier)
    return dataclasses.replace(spec, when=when)


def _read_when(reader: _Reader, where: str, when: object, earlier: dict[str, ParamSpec]) -> tuple[tuple[str, tuple], ...]:
    if when is None:
        return ()
    if not isinstance(when, dict) or not when:
        raise reader.error(f"{where}.when", f"expected a table of parameter = value(s), got {show_value(when)}")
    conditions = []
    for key, values in _flatten(when).items():
        if key not in earlier:
            known = ", ".join(earlier) or "none"
            raise reader.error(f"{where}.when.{key}", f"expected a parameter defined above this one (defined: {known})")
        values = tuple(values) if isinstance(values, list) else (values,)
        for value in values:
            if not earlier[key].contains(value):
                raise reader.error(f"{where}.when.{key}", f"{show_value(value)} is not a value params.{key} can take")
        conditions.append((key, values))
    return tuple(conditions)


def _read_params(reader: _Reader, data: Mapping, cfg: TrainConfig, settings: Mapping, nccl_settings: Mapping) -> tuple[ParamSpec, ...]:
    params: dict[str, ParamSpec] = {}

    def walk(table: Mapping, prefix: str) -> None:
        for key, value in table.items():
            name = f"{prefix}{key}"
            if not isinstance(value, dict):
                raise reader.error(f"params.{name}", f"expected a table with a 'type' key, got {show_value(value)}")
            if "type" not in value and not nccl.is_nccl_name(name):
                walk(value, f"{name}.")
                continue
            if name in settings or name in nccl_settings:
                raise reader.error(f"params.{name}", f"also fixed in settings.{name}; keep one")
            params[name] = _read_param(reader, name, value, cfg, dict(params))

    walk(reader.table(data, "params"), "")
    for spec in params.values():
        _check_value_can_apply(reader, spec, params, cfg)
    return tuple(params.values())


def _representatives(spec: ParamSpec) -> tuple:
    """Values standing for a parameter's range: its choices, or its bounds."""
    return spec.choices if spec.kind == "categorical" else (spec.low, spec.high)


def _check_value_can_apply(reader: _Reader, spec: ParamSpec, params: Mapping[str, ParamSpec], cfg: TrainConfig) -> None:
    """Refuse a value of ``spec`` that no trial could run: one the base config (settings applied)
    rejects with every combination of the other parameters, tried at their choices or bounds
    (e.g. ``encoding.max_resolution`` 8 with ``encoding.base_resolution`` fixed at 16). Past
    :data:`_MAX_CHECKED_COMBINATIONS` combinations only the parameters of its own config block
    are varied, where nearly all cross-key rules lie.

    Raises:
        ConfigError: naming the study file, the parameter's value and the trainer's complaint.
    """
    if nccl.is_nccl_name(spec.name):
        return
    others = [p for name, p in params.items() if name != spec.name and not nccl.is_nccl_name(name)]
    if math.prod(len(_representatives(p)) for p in others) > _MAX_CHECKED_COMBINATIONS:
        block = spec.name.partition(".")[0]
        others = [p for p in others if p.name.partition(".")[0] == block]
    combos = list(itertools.product(*(_representatives(p) for p in others)))
    for i, value in enumerate(_representatives(spec)):
        first_problem = None
        for combo in combos:  # never empty: the product of no parameters is one empty combination
            try:
                apply_overrides(cfg, {spec.name: value, **{p.name: v for p, v in zip(others, combo)}})
                break
            except ConfigError as exc:
                first_problem = first_problem or str(exc).removeprefix("overrides: ")
        else:
            where = f"params.{spec.name}.choices[{i}]" if spec.kind == "categorical" else \
                f"params.{spec.name}.{'low' if i == 0 else 'high'}"
            raise reader.error(where, f"{show_value(value)} fails in every trial with this study's settings: {first_problem}")


def _read_objectives(reader: _Reader, data: Mapping, budget: BudgetSpec) -> tuple[ObjectiveSpec, ...]:
    entries = data.get("objectives")
    if not isinstance(entries, list) or not entries:
        raise reader.error("objectives", "expected one or more [[objectives]] tables with a name, e.g. "
                           'name = "throughput_samples_per_s"')
    objectives: list[ObjectiveSpec] = []
    for i, entry in enumerate(entries):
        where = f"objectives[{i}]"
        if not isinstance(entry, dict):
            raise reader.error(where, f"expected a table, got {show_value(entry)}")
        name = entry.get("name")
        if name not in OBJECTIVES:
            raise reader.error(f"{where}.name", f"expected one of {', '.join(OBJECTIVES)}, got {show_value(name)}")
        if name in (o.name for o in objectives):
            raise reader.error(f"{where}.name", f"objective {name} listed twice")
        reader.only(entry, where, ["name", *OBJECTIVES[name].keys])
        if name == "time_to_psnr_s":
            if "target_db" not in entry:
                raise reader.error(where, "missing key 'target_db' (the PSNR to reach, dB)")
            target = reader.value(entry, where, "target_db", lambda v: is_number(v) and v > 0, "a number > 0 (dB)")
            every = reader.value(entry, where, "eval_every_steps", lambda v: is_int(v) and v >= 1,
                                 "an integer >= 1", default=DEFAULT_EVAL_EVERY_STEPS)
            objectives.append(ObjectiveSpec(name, target_db=float(target), eval_every_steps=every))
            continue
        if OBJECTIVES[name].budget == "seconds" and budget.seconds is None:
            raise reader.error(f"{where}.name", f"{name} needs a time budget: set budget.seconds")
        objectives.append(ObjectiveSpec(name))
    return tuple(objectives)


def _read_budget(reader: _Reader, data: Mapping) -> BudgetSpec:
    table = reader.table(data, "budget")
    reader.only(table, "budget", ["steps", "seconds", "trial_timeout_s"])
    steps = reader.value(table, "budget", "steps", lambda v: is_int(v) and 1 <= v <= BUDGET_STEPS_CAP,
                         f"an integer in 1..{BUDGET_STEPS_CAP:,}")
    seconds = reader.value(table, "budget", "seconds", lambda v: is_number(v) and v > 0, "a number > 0 (s)")
    if (steps is None) == (seconds is None):
        raise reader.error("budget", "expected exactly one of steps, seconds")
    default_timeout = 600.0 if seconds is None else 300.0 + 2.0 * seconds
    timeout = reader.value(table, "budget", "trial_timeout_s", lambda v: is_number(v) and v > 0,
                           "a number > 0 (s)", default=default_timeout)
    if seconds is not None and timeout <= seconds:
        raise reader.error("budget.trial_timeout_s", f"expected more than budget.seconds ({seconds:g}), got {timeout:g}")
    return BudgetSpec(steps=steps, seconds=None if seconds is None else float(seconds), trial_timeout_s=float(timeout))


def _read_sampler(reader: _Reader, data: Mapping) -> SamplerSpec:
    table = reader.table(data, "sampler")
    reader.only(table, "sampler", ["type", "seed", "n_startup_trials", "population_size"])
    kind = reader.value(table, "sampler", "type", lambda v: v in ("tpe", "random", "nsga2"),
                        "one of tpe, random, nsga2", default="tpe")
    seed = reader.value(table, "sampler", "seed", lambda v: is_int(v) and 0 <= v < 2**32,
                        "an integer in [0, 2^32)", default=0)
    startup = reader.value(table, "sampler", "n_startup_trials", lambda v: is_int(v) and v >= 0, "an integer >= 0")
    population = reader.value(table, "sampler", "population_size", lambda v: is_int(v) and v >= 2, "an integer >= 2")
    if startup is not None and kind != "tpe":
        raise reader.error("sampler.n_startup_trials", f"only for sampler.type = tpe, not {kind}")
    if population is not None and kind != "nsga2":
        raise reader.error("sampler.population_size", f"only for sampler.type = nsga2, not {kind}")
    return SamplerSpec(type=kind, seed=seed, n_startup_trials=startup, population_size=population)


_PRUNER_OPTIONS = {
    "median": ["n_startup_trials", "n_warmup_steps", "interval_steps"],
    "successive_halving": ["min_resource", "reduction_factor", "min_early_stopping_rate"],
    "hyperband": ["min_resource", "max_resource", "reduction_factor"],
    "none": [],
}
_MARK_OPTIONS = ["eval_every_steps", "eval_at", "eval_images"]


def _read_pruner(reader: _Reader, data: Mapping, objectives: tuple[ObjectiveSpec, ...],
                 budget: BudgetSpec) -> PrunerSpec:
    table = reader.table(data, "pruner")
    kinds = list(_PRUNER_OPTIONS)
    kind = reader.value(table, "pruner", "type", lambda v: v in kinds, f"one of {', '.join(kinds)}", default="none")
    options = _PRUNER_OPTIONS[kind]
    reader.only(table, "pruner", ["type", *options, *(_MARK_OPTIONS if kind != "none" else [])])
    if kind != "none" and len(objectives) > 1:
        raise reader.error("pruner.type", f"{kind} needs a single objective (Optuna prunes single-objective "
                           f"studies only); use none with {len(objectives)} objectives")
    if kind != "none" and not OBJECTIVES[objectives[0].name].has_intermediate:
        raise reader.error("pruner.type", f"{objectives[0].name} reports no intermediate values to prune on; use none")
    nonneg = (lambda v: is_int(v) and v >= 0, "an integer >= 0")
    positive = (lambda v: is_int(v) and v >= 1, "an integer >= 1")
    spec = PrunerSpec(type=kind)
    values = {
        "n_startup_trials": reader.value(table, "pruner", "n_startup_trials", *nonneg, default=spec.n_startup_trials),
        "n_warmup_steps": reader.value(table, "pruner", "n_warmup_steps", *nonneg, default=spec.n_warmup_steps),
        "interval_steps": reader.value(table, "pruner", "interval_steps", *positive, default=spec.interval_steps),
        "min_resource": reader.value(table, "pruner", "min_resource", *positive, default=spec.min_resource),
        "max_resource": reader.value(table, "pruner", "max_resource", lambda v: v == "auto" or (is_int(v) and v >= 1),
                                     '"auto" or an integer >= 1', default=spec.max_resource),
        "reduction_factor": reader.value(table, "pruner", "reduction_factor", lambda v: is_int(v) and v >= 2,
                                         "an integer >= 2", default=spec.reduction_factor),
        "min_early_stopping_rate": reader.value(table, "pruner", "min_early_stopping_rate", *nonneg,
                                                default=spec.min_early_stopping_rate),
        "eval_every_steps": reader.value(table, "pruner", "eval_every_steps", *positive),
        "eval_images": reader.value(table, "pruner", "eval_images", *positive),
    }
    at_rungs = reader.value(table, "pruner", "eval_at", lambda v: v == "rungs", '"rungs"') is not None
    marks_key = "pruner.eval_at" if at_rungs else "pruner.eval_every_steps"
    if at_rungs and values["eval_every_steps"] is not None:
        raise reader.error("pruner.eval_at", "give pruner.eval_at or pruner.eval_every_steps, not both")
    if at_rungs and (kind not in ("successive_halving", "hyperband") or budget.seconds is None):
        raise reader.error("pruner.eval_at", "marks at the rungs take successive_halving or hyperband with a "
                           "budget.seconds (with budget.steps, eval_every_steps marks fixed steps)")
    if values["eval_images"] is not None and values["eval_every_steps"] is None and not at_rungs:
        raise reader.error("pruner.eval_images", "needs pruner.eval_every_steps or pruner.eval_at (the marks its "
                           "views are evaluated at)")
    marks = values["eval_every_steps"] is not None or at_rungs
    if marks:
        if objectives[0].name != "psnr_at_budget_db":
            raise reader.error(marks_key, "evaluation marks report the PSNR of psnr_at_budget_db; "
                               f"{objectives[0].name} reports its own intermediate values")
        if budget.steps is not None and values["eval_every_steps"] >= budget.steps:
            raise reader.error("pruner.eval_every_steps", f"expected fewer than budget.steps ({budget.steps}) so a "
                               f"mark falls inside the budget, got {values['eval_every_steps']}")
        if kind == "median" and budget.seconds is not None:
            raise reader.error("pruner.type", "median compares trials at equal resource, which evaluation marks "
                               "under a seconds budget rarely share; use successive_halving or hyperband")
    if kind == "hyperband" and values["max_resource"] == "auto" and marks:
        # the budget is the largest resource a trial gets (steps, or whole seconds of training)
        values["max_resource"] = int(budget.steps if budget.steps is not None else math.floor(budget.seconds))
    if kind in ("successive_halving", "hyperband") and marks:
        _check_rungs(reader, kind, values, budget)
    if at_rungs:
        values["eval_at_s"] = rung_seconds(kind, values, budget)
    return dataclasses.replace(spec, **values)


def rung_seconds(kind: str, values: Mapping[str, Any], budget: BudgetSpec) -> tuple[int, ...]:
    """The whole seconds of training at which the pruner compares trials, below the budget's
    seconds: ``min_resource · reduction_factor^k`` for k from ``min_early_stopping_rate``
    (successive halving) or 0 (Hyperband: its brackets' rungs are all of this form, and
    ``max_resource`` only sets how many brackets there are, not where a bracket stops comparing)."""
    k = values["min_early_stopping_rate"] if kind == "successive_halving" else 0
    rungs = []
    while (second := values["min_resource"] * values["reduction_factor"] ** k) < budget.seconds:
        rungs.append(int(second))
        k += 1
    return tuple(rungs)


def _check_rungs(reader: _Reader, kind: str, values: Mapping[str, Any], budget: BudgetSpec) -> None:
    """Refuse resources under which the pruner could never stop a trial: its first rung (where
    trials are first compared) at or past the budget, or a largest resource past it."""
    most = int(budget.steps if budget.steps is not None else math.floor(budget.seconds))
    unit = "steps" if budget.steps is not None else "s"
    where = f"budget.steps ({most})" if budget.steps is not None else f"budget.seconds ({budget.seconds:g} s)"
    if kind == "hyperband":
        top = values["max_resource"]
        if top > most:
            raise reader.error("pruner.max_resource", f"expected at most {where}, got {top}")
        if values["min_resource"] >= top:
            raise reader.error("pruner.min_resource", f"expected less than pruner.max_resource ({top}), "
                               f"got {values['min_resource']}")
        return
    first = values["min_resource"] * values["reduction_factor"] ** values["min_early_stopping_rate"]
    if first >= (most if budget.steps is not None else budget.seconds):
        how = ("pruner.min_resource" if values["min_early_stopping_rate"] == 0 else
               "pruner.min_resource × reduction_factor ^ min_early_stopping_rate")
        raise reader.error("pruner.min_resource", f"the first rung, {how} = {first} {unit}, is not inside "
                           f"{where}: no trial could be stopped early")


MARK_SETTINGS = ("training.eval_every", "training.eval_at_s", "training.eval_every_max_images")
"""Trainer settings the evaluation marks of a study's pruner (or a ``time_to_psnr_s`` objective) set."""


def _check_marks_not_in_settings(reader: _Reader, settings: Mapping[str, Any], pruner: PrunerSpec,
                                 objectives: tuple[ObjectiveSpec, ...]) -> None:
    """Refuse ``[settings]`` that the marks would replace without a word: the pruner's marks set
    :data:`MARK_SETTINGS`, an objective's ``eval_every_steps`` sets ``training.eval_every``."""
    if pruner.has_marks:
        owned = {key: "the pruner's evaluation marks (pruner.eval_every_steps or pruner.eval_at, "
                      "pruner.eval_images)" for key in MARK_SETTINGS}
    else:
        owned = {}
    if any(o.eval_every_steps is not None for o in objectives):
        owned.setdefault("training.eval_every", "the objective's eval_every_steps")
    for key, owner in owned.items():
        if key in settings:
            raise reader.error(f"settings.{key}", f"set by {owner}; leave it out of [settings]")


def load_study(path: str | Path, *, scene: str | Path | None = None) -> StudySpec:
    """Read and validate a study file.

    Args:
        path: the TOML study file.
        scene: a scene path that replaces ``study.scene`` (``--scene``; relative to the working
            directory), or None.

    Returns:
        The validated :class:`StudySpec`.

    Raises:
        ConfigError: the file is missing or not TOML, or a key or value is invalid: one line
            naming the file and the dotted key (``studies/x.toml: budget.seconds: expected a
            number > 0 (s), got -1``).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: study file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the study file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    reader = _Reader(path)
    reader.only(data, "", ["study", "settings", "budget", "sampler", "pruner", "objectives", "params"])

    study = reader.table(data, "study")
    reader.only(study, "study", ["name", "scene", "config", "trials", "timeout_s"])
    name = reader.value(study, "study", "name", is_study_name, STUDY_NAME_RULE, default=None)
    if name is None:
        name = path.stem if _NAME_RE.fullmatch(path.stem) else "study"
    scene_text = reader.value(study, "study", "scene", lambda v: isinstance(v, str) and v != "",
                              'a scene path or "demo"', default=DEMO_SCENE)
    if scene is not None:
        scene_path = Path(scene).expanduser()
        if not scene_path.exists():
            raise ConfigError(f"--scene {scene}: scene path does not exist")
        scene_value = str(scene_path.resolve())
    elif scene_text == DEMO_SCENE:
        scene_value = DEMO_SCENE
    else:
        scene_value = str(_resolve_path(reader, "study.scene", scene_text))
    config_text = reader.value(study, "study", "config", lambda v: isinstance(v, str) and v != "", "a config path")
    base_config_path = None if config_text is None else _resolve_path(reader, "study.config", config_text)
    trials = reader.value(study, "study", "trials", lambda v: is_int(v) and 1 <= v <= MAX_TRIALS,
                          f"an integer in [1, {MAX_TRIALS}]", default=DEFAULT_TRIALS)
    timeout = reader.value(study, "study", "timeout_s", lambda v: is_number(v) and v > 0, "a number > 0 (s)")
    try:
        cfg = load_config(base_config_path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: study.config: {exc}") from None

    settings, nccl_settings = _read_settings(reader, data, cfg)
    cfg = apply_overrides(cfg, settings)
    budget = _read_budget(reader, data)
    params = _read_params(reader, data, cfg, settings, nccl_settings)
    objectives = _read_objectives(reader, data, budget)
    sampler = _read_sampler(reader, data)
    pruner = _read_pruner(reader, data, objectives, budget)
    _check_marks_not_in_settings(reader, settings, pruner, objectives)
    spec = StudySpec(
        path=path,
        name=name,
        scene=scene_value,
        base_config_path=base_config_path,
        settings=settings,
        nccl_settings=nccl_settings,
        params=params,
        objectives=objectives,
        budget=budget,
        sampler=sampler,
        pruner=pruner,
        trials=trials,
        timeout_s=None if timeout is None else float(timeout),
    )
    try:
        spec.base_config()
    except ConfigError as exc:
        raise ConfigError(f"{path}: settings: {str(exc).removeprefix('overrides: ')}") from None
    return spec

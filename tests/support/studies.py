"""Study files for the sweep tests: the tiny CPU settings and the given sections (the ``tiny_study``
fixture is in tests/integration/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.scenes import TINY

# The tiny CPU trainer settings of the trainer tests; the budget sets training.n_steps.
TINY_SETTINGS = {**{k: v for k, v in TINY.items() if k != "training.n_steps"},
                 "training.cpu_threads": 1}  # two OpenMP threads per rank crawl on a loaded 2-core machine

THROUGHPUT = '[[objectives]]\nname = "throughput_samples_per_s"\n'


def toml_value(value: object) -> str:
    """A Python value as a TOML value (strings, numbers, booleans, lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def study_text(
    *,
    scene: Path | str = "demo",
    settings: dict | None = None,
    params: str = "",
    objectives: str = THROUGHPUT,
    budget: str = "steps = 20\ntrial_timeout_s = 120",
    trials: int = 3,
    sampler: str = 'type = "random"\nseed = 3',
    pruner: str = 'type = "none"',
    name: str = "t",
) -> str:
    """A study file's text: TINY_SETTINGS (+ ``settings``) and the given sections."""
    merged = {**TINY_SETTINGS, **(settings or {})}
    lines = ["[study]", f"name = {json.dumps(name)}", f"scene = {json.dumps(str(scene))}", f"trials = {trials}", "",
             "[settings]"]
    lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in merged.items() if v is not None]
    lines += ["", "[budget]", budget, "", "[sampler]", sampler, "", "[pruner]", pruner, "", objectives, params]
    return "\n".join(lines) + "\n"


def write_study(path: Path, **kwargs) -> Path:
    path.write_text(study_text(**kwargs), encoding="utf-8")
    return path

"""Helpers for the sweep tests: tiny study files on the tiny demo scene, process checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.train.conftest import TINY, demo_scene  # noqa: F401  (the shared tiny demo scene fixture)

REPO_ROOT = Path(__file__).resolve().parents[2]

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


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose command line contains ``text``: [(pid, cmdline)]."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry.name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state not in ("Z", "X"):
            found.append((int(entry.name), cmdline))
    return found


@pytest.fixture
def tiny_study(tmp_path, demo_scene) -> Path:
    """A 3-trial random-sampler study of 20 steps on the tiny demo scene. Its parameter costs
    nothing on one rank (the gradient bucket size), and its trainer default (25 MiB) is one of its
    choices, so the default trial takes it."""
    params = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'
    return write_study(tmp_path / "tiny.toml", scene=demo_scene, params=params)

"""Intra-op threads of a CPU run: cores // ranks by default, training.cpu_threads / --cpu-threads
to override; the opening line says how many, and the process really uses that many."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import pytest

from tests.support.cli import deepest_bracket
from tests.support.paths import REPO
from tests.support.scenes import tiny_config_file
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined
from trainer.cpu_threads import available_cores, cpu_threads_per_rank


def test_the_rule_divides_the_cores_among_the_ranks():
    assert cpu_threads_per_rank(0, 1, cores=8) == 8
    assert cpu_threads_per_rank(0, 3, cores=8) == 2
    assert cpu_threads_per_rank(0, 4, cores=2) == 1  # never below one
    assert cpu_threads_per_rank(3, 4, cores=2) == 3  # an explicit count is taken as given
    with pytest.raises(ValueError):
        cpu_threads_per_rank(-1, 1, cores=2)


def _opening_line(tmp_path: Path, name: str, *extra: str) -> str:
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=32, n_train=4, n_val=1, n_test=1)
    config = tiny_config_file(tmp_path)
    out = subprocess.run([sys.executable, "-m", "trainer", "--device", "cpu", "--scene", str(scene), "--config",
                          str(config), "--n-steps", "1", "--no-eval", "--quiet", "--out", str(tmp_path / name), *extra],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    opening = lines[:1] + list(takewhile(lambda line: line.startswith(CONTINUATION), lines[1:]))
    assert all(len(line) <= LINE_WIDTH for line in opening if " " in line.strip()), opening  # a long path stays whole
    return joined(opening)


def test_the_opening_line_names_the_threads_and_the_flag_overrides_them(tmp_path):
    cores = available_cores()
    auto = _opening_line(tmp_path, "auto")
    assert re.search(rf", 1 rank, {cores} CPU threads? per rank \({cores} cores // 1 rank\), config ", auto), auto
    given = _opening_line(tmp_path, "given", "--cpu-threads", "3")
    assert ", 1 rank, 3 CPU threads per rank (training.cpu_threads), config " in given, given
    assert deepest_bracket(auto) == deepest_bracket(given) == 1, (auto, given)  # no "(... (...))"
    assert json.loads((tmp_path / "given" / "config.json").read_text())["training"]["cpu_threads"] == 3


def test_the_threads_are_applied_to_the_process(tmp_path):
    code = ("import torch; from trainer.cpu_threads import apply_cpu_threads; "
            "n = apply_cpu_threads(0, 1); assert torch.get_num_threads() == n, (n, torch.get_num_threads()); "
            "apply_cpu_threads(3, 1); print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_the_launchers_opening_line_divides_the_cores_among_the_hosts_ranks(tmp_path):
    import argparse

    from trainer.run.settings import opening_line
    from trainer.contract.config import apply_overrides, load_config

    cfg = apply_overrides(load_config(None), {"training.device": "cpu", "data.scene": str(tmp_path)})
    args = argparse.Namespace(config=tmp_path / "c.json")
    cores = available_cores()
    line = joined(opening_line(cfg, args, 4, 2).splitlines())  # 2 nodes of 2 ranks
    per_rank = max(1, cores // 2)
    assert f"on cpu, 4 ranks, {per_rank} CPU thread{'s' if per_rank != 1 else ''} per rank ({cores} cores // 2 ranks), " in line, line
    given = joined(opening_line(apply_overrides(cfg, {"training.cpu_threads": 1}), args, 4, 2).splitlines())
    assert "4 ranks, 1 CPU thread per rank (training.cpu_threads), " in given, given

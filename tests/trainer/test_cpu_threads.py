"""Intra-op threads of a CPU run: the cores other processes leave free // ranks by default,
training.cpu_threads / --cpu-threads to override; the opening line says how many (and the load
when it lowered them), and the process really uses that many. The load is given, never measured
here: the suite counts the host as idle (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import pytest

from tests.support.cli import deepest_bracket
from tests.support.paths import REPO, repo_python_path
from tests.support.scenes import tiny_config_file
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined
from trainer.contract.threads import (
    LOAD_ENV, HostLoad, available_cores, cpu_threads, cpu_threads_per_rank, describe_cpu_threads, host_load,
)

IDLE = HostLoad(0.0, 0)


def test_the_rule_divides_the_cores_among_the_ranks():
    assert cpu_threads_per_rank(0, 1, cores=8, load=IDLE) == 8
    assert cpu_threads_per_rank(0, 3, cores=8, load=IDLE) == 2
    assert cpu_threads_per_rank(0, 4, cores=2, load=IDLE) == 1  # never below one
    assert cpu_threads_per_rank(2, 4, cores=2, load=IDLE) == 2  # an explicit count is taken as given
    assert cpu_threads_per_rank(3, 4, cores=8, load=IDLE) == 3
    with pytest.raises(ValueError):
        cpu_threads_per_rank(-1, 1, cores=2)


def test_an_explicit_count_above_the_cores_is_capped_there_and_said():
    chosen = cpu_threads(999, 1, "--cpu-threads", cores=2, load=IDLE)
    assert chosen.count == 2
    assert chosen.words == "2 CPU threads per rank (--cpu-threads 999, capped at the host's 2 cores)"


def _loaded(monkeypatch, average: float, runnable_others: int, own_cpu_s: float = 0.0, host_cpus: int = 2) -> None:
    """The host as measured: a 1-minute load average, the other processes' threads runnable now,
    this process's CPU seconds and the host's CPUs."""
    import trainer.contract.threads as threads

    monkeypatch.delenv(LOAD_ENV, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (average, average, average))
    monkeypatch.setattr(threads, "runnable_others", lambda: runnable_others)
    monkeypatch.setattr(os, "times", lambda: os.times_result((own_cpu_s, 0.0, 0.0, 0.0, 0.0)))
    monkeypatch.setattr(os, "cpu_count", lambda: host_cpus)


def test_the_cores_other_processes_keep_busy_are_left_to_them(monkeypatch):
    _loaded(monkeypatch, 3.8, runnable_others=4)
    assert host_load(2) == HostLoad(3.8, 2)
    assert cpu_threads(0, 1, cores=2) == cpu_threads(0, 1, cores=2, load=host_load(2))
    assert cpu_threads(0, 1, cores=2).words == "1 CPU thread per rank (2 cores, load 3.8)"
    _loaded(monkeypatch, 3.8, runnable_others=4, host_cpus=8)
    assert cpu_threads(0, 1, cores=8).words == "4 CPU threads per rank (8 cores, load 3.8)"  # 4 of 8 busy, rounded
    assert cpu_threads(0, 2, cores=8).words == "2 CPU threads per rank (8 cores, load 3.8: 4 free // 2 ranks)"
    assert cpu_threads(3, 1, cores=8).words == "3 CPU threads per rank (training.cpu_threads)"  # obeyed as is
    assert describe_cpu_threads(1, 1, "--cpu-threads") == "1 CPU thread per rank (--cpu-threads)"


def test_a_load_the_rule_does_not_count(monkeypatch):
    _loaded(monkeypatch, 1.4, runnable_others=2)
    assert cpu_threads(0, 1, cores=2).words == "1 CPU thread per rank (2 cores, load 1.4)"
    _loaded(monkeypatch, 0.4, runnable_others=2)  # rounded: 0 cores busy
    assert cpu_threads(0, 1, cores=2).words == "2 CPU threads per rank (2 cores // 1 rank)"
    _loaded(monkeypatch, 1.4, runnable_others=2, own_cpu_s=60.0)  # a minute of this process's own: 0.4 others
    assert cpu_threads(0, 1, cores=2).count == 2
    _loaded(monkeypatch, 3.8, runnable_others=0)  # the average of processes that have ended: no core busy now
    assert cpu_threads(0, 1, cores=2).words == "2 CPU threads per rank (2 cores // 1 rank)"
    _loaded(monkeypatch, 4.0, runnable_others=4, host_cpus=8)  # 2 of the host's 8 cores: a quarter of its load
    assert host_load(2) == HostLoad(4.0, 1)


def test_the_load_can_be_given(monkeypatch):
    monkeypatch.setenv(LOAD_ENV, "3.8")
    assert host_load(2) == HostLoad(3.8, 2) and host_load(16) == HostLoad(3.8, 4)
    monkeypatch.setenv(LOAD_ENV, "0")
    assert host_load(2) == IDLE
    monkeypatch.setenv(LOAD_ENV, "busy")
    with pytest.raises(ValueError, match=rf"{LOAD_ENV}='busy': expected a load average >= 0"):
        host_load(2)


def _train(tmp_path: Path, name: str, *extra: str, load: str = "0") -> list[str]:
    """The output lines of a one-step CPU run off a TTY on a host of the given load."""
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=32, n_train=4, n_val=1, n_test=1)
    config = tiny_config_file(tmp_path)
    out = subprocess.run([sys.executable, "-m", "trainer", "--device", "cpu", "--scene", str(scene), "--config",
                          str(config), "--n-steps", "1", "--no-eval", "--quiet", "--out", str(tmp_path / name), *extra],
                         cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, LOAD_ENV: load})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _opening_line(tmp_path: Path, name: str, *extra: str, load: str = "0") -> str:
    lines = _train(tmp_path, name, *extra, load=load)
    opening = lines[:1] + list(takewhile(lambda line: line.startswith(CONTINUATION), lines[1:]))
    assert all(len(line) <= LINE_WIDTH for line in opening if " " in line.strip()), opening  # a long path stays whole
    return joined(opening)


def test_the_opening_line_names_the_threads_and_the_flag_overrides_them(tmp_path):
    cores = available_cores()
    auto = _opening_line(tmp_path, "auto")
    assert re.search(rf", 1 rank, {cores} CPU threads? per rank \({cores} cores // 1 rank\), config ", auto), auto
    given = _opening_line(tmp_path, "given", "--cpu-threads", "1")
    assert ", 1 rank, 1 CPU thread per rank (training.cpu_threads), config " in given, given
    assert deepest_bracket(auto) == deepest_bracket(given) == 1, (auto, given)  # no "(... (...))"
    assert json.loads((tmp_path / "given" / "config.json").read_text())["training"]["cpu_threads"] == 1


def test_a_loaded_host_lowers_the_threads_and_the_opening_line_says_why(tmp_path):
    cores = available_cores()
    n = max(1, cores - 4)
    loaded = _opening_line(tmp_path, "loaded", load="3.8")
    assert f", 1 rank, {n} CPU thread{'s' if n != 1 else ''} per rank ({cores} cores, load 3.8), config " in loaded
    assert deepest_bracket(loaded) == 1, loaded
    given = _opening_line(tmp_path, "given", "--cpu-threads", "2", load="3.8")
    assert ", 1 rank, 2 CPU threads per rank (training.cpu_threads), config " in given, given  # obeyed as is


def test_the_threads_of_a_loaded_host_are_the_ones_set(monkeypatch):
    import torch

    from trainer.cpu_threads import apply_cpu_threads

    monkeypatch.setenv(LOAD_ENV, str(available_cores() + 1.0))  # every core busy
    chosen = apply_cpu_threads(0, 1)
    assert chosen.count == torch.get_num_threads() == 1, chosen
    assert chosen.words == f"1 CPU thread per rank ({available_cores()} cores, load {available_cores() + 1.0:.1f})"
    assert apply_cpu_threads(2, 1).count == torch.get_num_threads() == 2


def test_off_a_terminal_the_start_up_is_said_when_it_begins_and_when_it_ends(tmp_path):
    from trainer.run.progress import STARTUP_BEGINS

    lines = _train(tmp_path, "plain")
    begins = lines.index(STARTUP_BEGINS)
    ends = next(i for i, line in enumerate(lines) if line.startswith("start-up "))
    assert begins < ends and lines[:begins][0].startswith("training "), lines
    assert re.match(r"start-up \d+\.\d s \(", lines[ends]), lines  # with its seconds


def test_the_threads_are_applied_to_the_process(tmp_path):
    code = ("import torch; from trainer.cpu_threads import apply_cpu_threads; "
            "n = apply_cpu_threads(0, 1).count; assert torch.get_num_threads() == n, (n, torch.get_num_threads()); "
            "apply_cpu_threads(1, 1); print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "", "PYTHONPATH": repo_python_path(), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


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

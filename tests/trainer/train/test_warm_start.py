"""Warm start: another run's model and occupancy grid, a fresh optimiser and step 0; refused
with --resume or on several ranks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from itertools import takewhile

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.run.lifecycle import run_training
from trainer.contract.config import dump_config
from trainer.data import load_scene
from trainer.contract.errors import ConfigError, SnapshotError
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined
from trainer.train.loop import Trainer


def _trainer(scene_path, **overrides) -> Trainer:
    return Trainer(tiny_config(**overrides), load_scene(scene_path))


def test_warm_start_takes_model_and_grid_not_optimiser_or_step(demo_scene, tmp_path):
    first = _trainer(demo_scene)
    first.train(n_steps=12)
    snap = first.save(tmp_path / "snap.pt")
    model = {k: v.clone() for k, v in first.field.state_dict().items()}
    grid = {k: v.clone() for k, v in first.grid.state_dict().items()}
    first.close()

    warm = _trainer(demo_scene)
    assert warm.warm_start(snap) == 12
    assert warm.step == 0 and not warm.optimizer.state_dict()["state"]
    assert all(torch.equal(v, model[k]) for k, v in warm.field.state_dict().items())
    assert all(torch.equal(v, grid[k]) for k, v in warm.grid.state_dict().items())
    _, loss_warm, _ = warm.train_step()
    warm.close()
    cold = _trainer(demo_scene)
    _, loss_cold, _ = cold.train_step()
    cold.close()
    assert float(loss_warm) < float(loss_cold)

    other = _trainer(demo_scene, network__n_neurons=32)
    with pytest.raises(SnapshotError, match=r"snap\.pt: model entry .* has shape"):
        other.warm_start(snap)
    other.close()
    other = _trainer(demo_scene, encoding__log2_hashmap_size=10)  # another table: named before any shape
    with pytest.raises(SnapshotError, match=r"snap\.pt: its hash grid was trained with F=2, T=2\^12, this config "
                                            r"and scene give F=2, T=2\^10 .*--set encoding\.log2_hashmap_size=12$"):
        other.warm_start(snap)
    other.close()


def test_warm_start_with_resume_is_refused(tmp_path):
    args = argparse.Namespace(save_snapshot=None, resume=tmp_path / "a.pt", warm_start=tmp_path / "b.pt")
    with pytest.raises(ConfigError, match="--warm-start: a run either resumes .* or starts warm, not both"):
        run_training(tiny_config(), args)


def test_warm_start_on_the_command_line(demo_scene, tmp_path):
    first = _trainer(demo_scene)
    first.train(n_steps=3)
    snap = first.save(tmp_path / "snap.pt")
    first.close()
    out = tmp_path / "run"
    config = tmp_path / "tiny.json"
    config.write_text(dump_config(tiny_config()))
    result = subprocess.run([sys.executable, "-m", "trainer", "--scene", str(demo_scene), "--config", str(config),
                             "--n-steps", "2", "--no-eval", "--quiet", "--out", str(out), "--warm-start", str(snap)],
                            capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr
    status = json.loads((out / "status.json").read_text())
    assert (status["state"], status["step"], status["warm_started_from_step"]) == ("completed", 2, 3)
    lines = result.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("warm start from"))
    note = lines[said:said + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION), lines[said + 1:]))
    assert joined(note) == f"warm start from {snap} (its step 3); optimiser and step counter start afresh"
    assert all(len(line) <= LINE_WIDTH for line in note if " " in line.strip()), note  # a long path stays whole

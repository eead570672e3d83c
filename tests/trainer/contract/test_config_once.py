"""A config file with overrides is checked once (one TrainConfig built), and a bad value is named
as the file's config followed by apply_overrides would name it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.contract import ConfigError, TrainConfig, apply_overrides, load_config


@pytest.fixture
def built(monkeypatch) -> list[TrainConfig]:
    """Every TrainConfig constructed while the test runs."""
    made: list[TrainConfig] = []
    original = TrainConfig.__post_init__

    def counting(self: TrainConfig) -> None:
        original(self)
        made.append(self)

    monkeypatch.setattr(TrainConfig, "__post_init__", counting)
    return made


def _file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "c.json"
    path.write_text("// a config\n" + json.dumps(data))
    return path


def test_a_file_and_its_overrides_build_one_config(tmp_path, built):
    path = _file(tmp_path, {"training": {"n_steps": 7}, "parallel": {"mode": "subgrid", "num_subgrids": 4}})
    cfg = load_config(path, {"training.quiet": True, "training.precision": "bf16", "data.scene": "s"})
    assert len(built) == 1
    assert (cfg.training.n_steps, cfg.training.quiet, cfg.training.precision, cfg.data.scene) == (7, True, "bf16", "s")
    assert cfg == apply_overrides(load_config(path), {"training.quiet": True, "training.precision": "bf16",
                                                      "data.scene": "s"})
    built.clear()
    load_config(None, {"training.n_steps": 3})
    assert len(built) == 1


def test_errors_are_named_as_before(tmp_path):
    path = _file(tmp_path, {"training": {"n_steps": 7}})
    with pytest.raises(ConfigError, match=r"^overrides: training\.n_steps: expected an integer >= 1, got 0$"):
        load_config(path, {"training.n_steps": 0})
    with pytest.raises(ConfigError, match=r"^overrides: unknown key 'training\.n_step' \(did you mean 'training\.n_steps'\?\)$"):
        load_config(path, {"training.n_step": 3})
    bad = _file(tmp_path, {"training": {"n_steps": -1}})
    with pytest.raises(ConfigError, match=rf"^{bad}: training\.n_steps: "):
        load_config(bad, {"training.quiet": True})


def test_an_instant_ngp_nested_optimizer_takes_its_override(tmp_path):
    nested = {"optimizer": {"otype": "ExponentialDecay", "decay_start": 100, "nested": {"otype": "Adam", "learning_rate": 0.01}}}
    cfg = load_config(_file(tmp_path, nested), {"optimizer.learning_rate": 0.02})
    assert (cfg.optimizer.learning_rate, cfg.optimizer.decay_start) == (0.02, 100)

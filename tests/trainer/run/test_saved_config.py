"""The run's config.json names its scene by an absolute path: the printed command that continues a
stopped run (``--config RUN/config.json --resume ...``) then works from any working directory."""

from __future__ import annotations

from pathlib import Path

from trainer.contract.config import apply_overrides, load_config
from trainer.run.lifecycle import saved_config


def test_the_scene_is_saved_absolute_and_nothing_else_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = apply_overrides(load_config(None), {"data.scene": "captures/fox", "training.n_steps": 7})
    saved = saved_config(cfg)
    assert saved["data"]["scene"] == str(tmp_path / "captures" / "fox")
    assert Path(saved["data"]["scene"]).is_absolute() and saved["training"]["n_steps"] == 7
    assert cfg.data.scene == "captures/fox"  # the config itself is left as given
    assert saved_config(load_config(None))["data"]["scene"] is None  # the built-in demo scene: none named

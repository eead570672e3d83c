"""An ``--out`` folder that holds a run is refused, except one whose run failed before it trained
(a scene or config the loader refused): the corrected command may use it again."""

from __future__ import annotations

import json

import pytest

from tests.support.scenes import tiny_config
from trainer.contract import ConfigError
from trainer.run.checks import check_before_start


def _failed_run(folder, *, trained: bool) -> None:
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "status.json").write_text(json.dumps({"state": "failed", "reason": "SceneError: images/ not found"}))
    if trained:
        (folder / "metrics.jsonl").write_text(json.dumps({"step": 10}) + "\n")


def test_a_run_that_failed_before_training_leaves_its_folder_free(tmp_path, demo_scene):
    cfg = tiny_config(data__scene=str(demo_scene))
    _failed_run(tmp_path / "loader", trained=False)
    check_before_start(cfg, tmp_path / "loader", None)  # nothing to keep: the folder is used again
    _failed_run(tmp_path / "trained", trained=True)
    with pytest.raises(ConfigError, match=r"already holds a run \(its status.json says 'failed'\)"):
        check_before_start(cfg, tmp_path / "trained", None)

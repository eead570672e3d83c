"""A ``--resume`` path that does not exist is refused by the start checks, before the run folder
is written, with one line naming the flag and what it expects."""

from __future__ import annotations

import pytest

from trainer.contract.config import load_config
from trainer.contract.errors import SnapshotError
from trainer.run.checks import check_before_start


def test_a_missing_resume_path_is_refused_before_anything_is_written(demo_scene, tmp_path):
    cfg = load_config(None, {"data.scene": str(demo_scene)})
    out = tmp_path / "run"
    with pytest.raises(SnapshotError) as err:
        check_before_start(cfg, out, tmp_path / "nope.pt")
    assert str(err.value) == (f"--resume {tmp_path / 'nope.pt'}: no such file or folder (expected a snapshot file, a run "
                              "folder or a checkpoint folder)")
    assert not out.exists()
    with pytest.raises(SnapshotError, match=r": a blender scene, not a run \(expected a snapshot file, a run folder"):
        check_before_start(cfg, out, demo_scene)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SnapshotError, match=r"empty: no snapshot or complete checkpoint in this folder \(expected"):
        check_before_start(cfg, out, tmp_path / "empty")
    assert not out.exists()
    (tmp_path / "run" / "snapshots").mkdir(parents=True)
    (tmp_path / "run" / "snapshots" / "step_0000010.pt").write_bytes(b"")
    check_before_start(cfg, out, tmp_path / "run")  # a run folder with a snapshot passes: the loader judges it

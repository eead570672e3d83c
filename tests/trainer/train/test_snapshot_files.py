"""Snapshot files that are not what they claim: one SnapshotError line each, never a traceback."""

import zipfile

import pytest

from trainer.train.divergence import DivergedError
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.contract.errors import ConfigError, SnapshotError
from trainer.contract.rundir import RunDir, prepare_output_file
from trainer.train.loop import Trainer
from trainer.train.snapshot import load_snapshot, save_snapshot


@pytest.fixture(scope="module")
def snapshot(demo_scene, tmp_path_factory):
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    trainer.train(n_steps=2)
    path = trainer.save(tmp_path_factory.mktemp("snap") / "snap.pt")
    trainer.close()
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        (b"hello", "truncated or corrupt snapshot, or not an ngptune snapshot"),
        (b"\x80", "truncated or corrupt snapshot, or not an ngptune snapshot"),
        (b"", "truncated or corrupt snapshot, or not an ngptune snapshot"),
    ],
)
def test_foreign_bytes_are_rejected_in_one_line(tmp_path, content, message):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(SnapshotError, match=message) as info:
        load_snapshot(path)
    assert "\n" not in str(info.value) and "weights_only" not in str(info.value)


def test_a_flipped_byte_is_caught_by_the_crc_check(snapshot, tmp_path):
    data = bytearray(snapshot.read_bytes())
    with zipfile.ZipFile(snapshot) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)  # the biggest tensor record
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    middle = start + info.file_size // 2
    for i in range(middle, middle + 64):
        data[i] ^= 0xFF
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="fails its CRC-32 check"):
        load_snapshot(bad)


def test_entries_with_wrong_types_and_nan_weights_are_named(snapshot, tmp_path):
    good = torch.load(snapshot, weights_only=True)
    for key, value, message in [
        ("model", None, "entry 'model' is missing"),
        ("step", "12", "entry 'step' is missing or not a int"),
        ("trainer_state", [], "entry 'trainer_state' is missing or not a dict"),
    ]:
        broken = dict(good, **{key: value})
        path = save_snapshot(tmp_path / f"{key}.pt", {k: v for k, v in broken.items() if k not in ("format", "version")})
        with pytest.raises(SnapshotError, match=message):
            load_snapshot(path)
    model = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in good["model"].items()}
    with pytest.raises(DivergedError, match="the snapshot was not written"):  # the writer refuses it
        save_snapshot(tmp_path / "nan.pt", {k: v for k, v in dict(good, model=model).items() if k not in ("format", "version")})
    path = tmp_path / "nan.pt"  # written by other means: the loader refuses it too
    torch.save(dict(good, model=model), path)
    with pytest.raises(SnapshotError, match="contains NaN or Infinity"):
        load_snapshot(path)


def test_bad_random_state_is_a_snapshot_error(snapshot, demo_scene, tmp_path):
    good = torch.load(snapshot, weights_only=True)
    rng = dict(good["rng"], generator=torch.zeros(3, dtype=torch.uint8))
    path = save_snapshot(tmp_path / "rng.pt", {k: v for k, v in dict(good, rng=rng).items() if k not in ("format", "version")})
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    with pytest.raises(SnapshotError, match="random-number or trainer state is unusable"):
        trainer.load(path)
    trainer.close()


def test_fp32_snapshot_resumes_in_fp16_with_a_fresh_scaler(snapshot, demo_scene):
    trainer = Trainer(tiny_config(training__precision="fp16"), load_scene(demo_scene))
    trainer.load(snapshot)
    assert trainer.step == 2 and trainer.scaler.is_enabled()
    trainer.close()


def test_a_resumed_run_decays_its_mlp_weights_by_its_own_config(snapshot, demo_scene):
    """The snapshot's optimiser groups hold the weight decay it trained with (the box model's 0);
    resumed with another optimizer.l2_reg, the run trains with that one, as its config records."""
    trainer = Trainer(tiny_config(optimizer__l2_reg=1e-5), load_scene(demo_scene))
    trainer.load(snapshot)
    assert trainer.step == 2 and [g["weight_decay"] for g in trainer.optimizer.param_groups[:2]] == [0.0, 1e-5]
    trainer.close()


def test_output_paths_are_checked_before_training(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="run directory .*afile.*cannot create"):
        RunDir(tmp_path / "afile").create()
    with pytest.raises(ConfigError, match="--save-snapshot .*: is a folder"):
        prepare_output_file(tmp_path, "--save-snapshot")
    with pytest.raises(ConfigError, match="--save-snapshot .*cannot create its folder"):
        prepare_output_file(tmp_path / "afile" / "snap.pt", "--save-snapshot")
    assert prepare_output_file(tmp_path / "new" / "snap.pt", "--save-snapshot").parent.is_dir()


def test_stale_temp_files_are_removed_and_files_get_normal_modes(tmp_path):
    import os
    import stat

    run = RunDir(tmp_path / "run").create()
    run.snapshots_dir.mkdir()
    (run.snapshots_dir / ".step_0000010.pt.abc.tmp").write_bytes(b"half")
    assert run.remove_stale_temp_files() == 1
    run.write_json(run.config_path, {"a": 1})
    mode = stat.S_IMODE(os.stat(run.config_path).st_mode)
    assert mode & stat.S_IRGRP  # readable beyond the owner, like other files (umask permitting)

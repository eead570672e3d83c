"""Sharded checkpoints (trainer/parallel/checkpoint.py) and resuming data-parallel training with the
same and with another world size (gloo/CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.paths import REPO
from tests.support.rank_runs import resume_subgrid_on_three
from tests.support.ranks import run_ranks
from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.contract.errors import SnapshotError
from trainer.parallel import checkpoint as ckpt
from trainer.parallel.trainer import DataParallelTrainer
from trainer.contract.rundir import RunDir

pytestmark = pytest.mark.timeout(150)


def test_latest_checkpoint_ignores_half_written_folders_and_prune_keeps_newest(tmp_path):
    run = RunDir(tmp_path)
    for step in (2, 4, 6):
        ckpt.save_checkpoint(ckpt.checkpoint_dir(run, step), {"w": torch.full((3,), float(step))}, {"x": 1}, {"step": step}, rank=0)
    crashed = ckpt.checkpoint_dir(run, 8)
    crashed.mkdir()
    (crashed / "rank0.pt").write_bytes(b"partial")  # killed before the marker
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.checkpoint_dir(run, 6)
    assert ckpt.latest_checkpoint(run.checkpoints_dir) == ckpt.checkpoint_dir(run, 6)
    assert [s for s, _ in ckpt.list_checkpoints(run.checkpoints_dir)] == [2, 4, 6]
    # what a resume from step 6 passes over (warned about), and nothing older or complete
    assert ckpt.skipped_incomplete(ckpt.checkpoint_dir(run, 6)) == [crashed]
    assert ckpt.skipped_incomplete(ckpt.checkpoint_dir(run, 4)) == [crashed]
    with pytest.raises(SnapshotError, match=r"step_0000008: not a complete checkpoint"):
        ckpt.load_meta(crashed)
    removed = ckpt.prune_checkpoints(run.checkpoints_dir, keep=2)
    assert sorted(p.name for p in removed) == ["step_0000002"]
    assert crashed.exists()  # newer than the newest complete one: maybe still being written
    w = torch.zeros(3)
    ckpt.load_tensors(ckpt.checkpoint_dir(run, 4), {"w": w})
    assert w.tolist() == [4.0, 4.0, 4.0]
    with pytest.raises(SnapshotError, match=r"entry 'w' has shape \[3\] in the checkpoint but \[2\]"):
        ckpt.load_tensors(ckpt.checkpoint_dir(run, 4), {"w": torch.zeros(2)})
    with pytest.raises(SnapshotError, match=r"no entry 'v'"):
        ckpt.load_tensors(ckpt.checkpoint_dir(run, 4), {"v": torch.zeros(3)})


def test_a_crash_while_rewriting_a_step_keeps_its_complete_checkpoint(tmp_path, monkeypatch):
    # A resumed or restarted run saves the step it resumed from again; a crash during that save must
    # leave the earlier complete checkpoint of that step in place (it may be the only one).
    run = RunDir(tmp_path)
    folder = ckpt.checkpoint_dir(run, 200)
    ckpt.save_checkpoint(folder, {"w": torch.full((3,), 1.0)}, {"x": 1}, {"step": 200}, rank=0)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed during the DCP write")

    dcp = ckpt._dcp()
    monkeypatch.setattr(dcp, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(folder, {"w": torch.full((3,), 2.0)}, {"x": 2}, {"step": 200}, rank=0)
    monkeypatch.undo()
    assert ckpt.latest_checkpoint(tmp_path) == folder
    w = torch.zeros(3)
    ckpt.load_tensors(folder, {"w": w})
    assert w.tolist() == [1.0, 1.0, 1.0]
    # the next save of that step replaces it whole, and leaves no staging folder behind
    ckpt.save_checkpoint(folder, {"w": torch.full((3,), 3.0)}, {"x": 3}, {"step": 200}, rank=0)
    ckpt.load_tensors(folder, {"w": w})
    assert w.tolist() == [3.0, 3.0, 3.0]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["step_0000200"]


def test_a_crash_between_the_renames_leaves_a_usable_checkpoint(tmp_path):
    run = RunDir(tmp_path)
    old = ckpt.checkpoint_dir(run, 100)
    ckpt.save_checkpoint(old, {"w": torch.full((3,), 1.0)}, {}, {"step": 100}, rank=0)
    new = ckpt.checkpoint_dir(run, 200)
    ckpt.save_checkpoint(new, {"w": torch.full((3,), 2.0)}, {}, {"step": 200}, rank=0)
    replaced = new.with_name(new.name + ".replaced")
    new.rename(replaced)  # killed after moving the old one aside, before the new one arrived
    staged = ckpt.save_checkpoint(ckpt.checkpoint_dir(run, 300), {"w": torch.full((3,), 3.0)}, {}, {"step": 300}, rank=0)
    staged.rename(staged.with_name("step_0000200.partial"))
    assert [(s, p.name) for s, p in ckpt.list_checkpoints(run.checkpoints_dir)] == [
        (100, "step_0000100"), (200, "step_0000200.partial")]  # the new one wins over the replaced one
    assert ckpt.checkpoint_step(ckpt.latest_checkpoint(tmp_path)) == 200
    removed = ckpt.prune_checkpoints(run.checkpoints_dir, keep=1)
    assert sorted(p.name for p in removed) == ["step_0000100", "step_0000200.replaced"]


def test_a_rescued_partial_checkpoint_is_promoted_not_deleted_by_the_next_save(tmp_path, monkeypatch):
    # After a crash between the renames the step's only complete copy may be step_N.partial; the
    # next save of that step must move it into place before it stages anew, not delete it.
    run = RunDir(tmp_path)
    folder = ckpt.checkpoint_dir(run, 60)
    ckpt.save_checkpoint(folder, {"w": torch.full((3,), 1.0)}, {}, {"step": 60}, rank=0)
    folder.rename(folder.with_name("step_0000060.partial"))
    assert ckpt.latest_checkpoint(tmp_path).name == "step_0000060.partial"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed during the DCP write")

    monkeypatch.setattr(ckpt._dcp(), "save", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(folder, {"w": torch.full((3,), 2.0)}, {}, {"step": 60}, rank=0)
    monkeypatch.undo()
    assert ckpt.latest_checkpoint(tmp_path) == folder
    w = torch.zeros(3)
    ckpt.load_tensors(folder, {"w": w})
    assert w.tolist() == [1.0, 1.0, 1.0]


def test_a_checkpoint_missing_a_ranks_files_is_not_marked_complete(tmp_path, monkeypatch):
    # Nodes that write different run directories: rank 1's files land elsewhere. Rank 0 must not
    # mark the folder complete (a resume would fail on the missing shard).
    run = RunDir(tmp_path)
    monkeypatch.setattr(ckpt, "_distributed", lambda: True)
    monkeypatch.setattr(ckpt, "_barrier", lambda: None)
    monkeypatch.setattr(ckpt.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(ckpt._dcp(), "save", lambda *a, **k: None)
    with pytest.raises(SnapshotError, match=r"step_0000010.partial: the files of rank\(s\) \[1\] are not in this folder: "
                                            r"every node must write the same run directory"):
        ckpt.save_checkpoint(ckpt.checkpoint_dir(run, 10), {"w": torch.zeros(1)}, {}, {"step": 10}, rank=0)
    assert ckpt.latest_checkpoint(tmp_path) is None


N_STEPS = 6
SAVE_AT = 3


def _run_and_resume(rank: int, world_size: int, scene: str, run_dir: str) -> dict:
    cfg = tiny_config(training__n_steps=N_STEPS)
    first = DataParallelTrainer(cfg, load_scene(Path(scene)), RunDir(run_dir))
    first.keep_checkpoints = 2
    losses = []
    for _ in range(N_STEPS):
        _, loss, _ = first.train_step()
        losses.append(float(loss))
        if first.step in (1, 2, SAVE_AT):
            first.save_checkpoint()
    final = {k: v.clone() for k, v in first.field.state_dict().items()}
    first.close()
    resumed = DataParallelTrainer(cfg, load_scene(Path(scene)), RunDir(run_dir))
    folder = resumed.load_checkpoint(Path(run_dir))
    start = resumed.step
    resumed_losses = []
    while resumed.step < N_STEPS:
        _, loss, _ = resumed.train_step()
        resumed_losses.append(float(loss))
    out = {
        "folder": str(folder),
        "start": start,
        "losses": losses,
        "resumed_losses": resumed_losses,
        "final": final,
        "resumed_final": {k: v.clone() for k, v in resumed.field.state_dict().items()},
    }
    resumed.close()
    return out


def _resume_on_three(rank: int, world_size: int, scene: str, run_dir: str) -> dict:
    cfg = tiny_config(training__n_steps=N_STEPS)
    trainer = DataParallelTrainer(cfg, load_scene(Path(scene)), RunDir(run_dir))
    trainer.load_checkpoint(Path(run_dir))
    start, global_rays = trainer.step, trainer.n_rays
    rays = [trainer.train_step()[0].n_rays for _ in range(2)]
    out = {"start": start, "global_rays": global_rays, "first_step_rays": rays[0], "step": trainer.step,
           "batch_scale": trainer.batch_scale,
           "param0": next(trainer.field.parameters()).detach().clone()}
    trainer.close()
    return out


@pytest.fixture(scope="module")
def two_rank_run(demo_scene, tmp_path_factory):
    """2 ranks train 6 steps (checkpoints at steps 1, 2, 3, keeping 2), then resume from step 3."""
    tmp = tmp_path_factory.mktemp("two_rank_run")
    run_dir = tmp / "run"
    results = run_ranks(_run_and_resume, 2, tmp, str(demo_scene), str(run_dir))
    folder = run_dir / "checkpoints" / f"step_{SAVE_AT:07d}"
    return run_dir, results, json.loads((folder / "meta.json").read_text())


def test_resume_on_the_same_world_size_reproduces_the_loss_curve(two_rank_run):
    run_dir, results, meta = two_rank_run
    steps = [s for s, _ in ckpt.list_checkpoints(run_dir / "checkpoints")]
    assert steps == [2, SAVE_AT]  # keep_checkpoints = 2
    for r in results:
        assert r["start"] == SAVE_AT and r["folder"].endswith(f"step_{SAVE_AT:07d}")
        assert r["resumed_losses"] == r["losses"][SAVE_AT:]  # bit for bit
        for name, value in r["final"].items():
            assert torch.equal(value, r["resumed_final"][name]), name
    assert results[0]["losses"] == results[1]["losses"]
    assert meta["step"] == SAVE_AT and meta["world_size"] == 2 and meta["mode"] == "data"


def test_resume_two_ranks_on_one_process(two_rank_run, demo_scene, tmp_path):
    run_dir, _, meta = two_rank_run
    single = DataParallelTrainer(tiny_config(training__n_steps=N_STEPS), load_scene(demo_scene), RunDir(tmp_path / "one"))
    keys = ckpt.checkpoint_keys(run_dir / "checkpoints" / f"step_{SAVE_AT:07d}")
    for name, _ in single.field.named_parameters():
        assert {f"model.{name}", f"optimizer.model.{name}.exp_avg", f"optimizer.model.{name}.exp_avg_sq"} <= keys, name
    assert {"occupancy.density", "occupancy.bitfield"} <= keys
    assert single.batch_scale == 1.0
    single.load_checkpoint(run_dir)
    assert single.step == SAVE_AT and single.n_rays == meta["trainer_state"]["n_rays"]
    assert single.batch_scale == 2.0 == meta["trainer_state"]["batch_scale"]  # the global batch is kept
    stats, loss, _ = single.train_step()
    assert stats.n_rays == meta["trainer_state"]["n_rays"] and single.step == SAVE_AT + 1
    assert torch.isfinite(loss)
    single.close()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate_shard", r"step_0000003/__0_0.distcp: truncated \(200 bytes, the index needs \d+\)"),
        ("delete_shard", r"step_0000003/__1_0.distcp: missing"),
        ("garbage_index", r"step_0000003/.metadata: unreadable checkpoint index"),
        ("meta_without_world_size", r"step_0000003/meta.json: entry 'world_size' is missing or not a int"),
        ("delete_rank_state", r"step_0000003/rank0.pt: missing \(the checkpoint was written by 2 ranks"),
    ],
)
def test_a_damaged_checkpoint_is_named_with_its_file(two_rank_run, demo_scene, tmp_path, damage, message):
    import shutil

    run_dir, _, _ = two_rank_run
    folder = tmp_path / "copy" / "checkpoints" / f"step_{SAVE_AT:07d}"
    shutil.copytree(run_dir / "checkpoints" / f"step_{SAVE_AT:07d}", folder)
    if damage == "truncate_shard":
        shard = folder / "__0_0.distcp"
        shard.write_bytes(shard.read_bytes()[:200])
    elif damage == "delete_shard":
        (folder / "__1_0.distcp").unlink()
    elif damage == "garbage_index":
        (folder / ".metadata").write_text("garbage\n")
    elif damage == "meta_without_world_size":
        meta = json.loads((folder / "meta.json").read_text())
        del meta["world_size"]
        (folder / "meta.json").write_text(json.dumps(meta))
    else:
        (folder / "rank0.pt").unlink()
    single = DataParallelTrainer(tiny_config(training__n_steps=N_STEPS), load_scene(demo_scene), RunDir(tmp_path / "one"))
    try:
        with pytest.raises(SnapshotError, match=message):
            single.load_checkpoint(folder)
    finally:
        single.close()


def test_a_resume_names_the_half_written_checkpoint_it_skips(two_rank_run, demo_scene, tmp_path):
    import shutil

    run_dir, _, _ = two_rank_run
    copy = tmp_path / "copy"
    shutil.copytree(run_dir / "checkpoints", copy / "checkpoints")
    half = copy / "checkpoints" / f"step_{SAVE_AT + 3:07d}"
    half.mkdir()
    (half / "rank0.pt").write_bytes(b"partial")  # the run stopped before the marker
    single = DataParallelTrainer(tiny_config(training__n_steps=N_STEPS), load_scene(demo_scene), RunDir(tmp_path / "one"))
    try:
        with pytest.warns(UserWarning, match=rf"step_{SAVE_AT + 3:07d}: incomplete checkpoint .* skipped; "
                                             rf"resuming from step_{SAVE_AT:07d}"):
            single.load_checkpoint(copy)
        assert single.step == SAVE_AT
    finally:
        single.close()


def _resume_both_on_three(rank: int, world_size: int, scene: str, data_run: str, subgrid_run: str) -> dict:
    return {"data": _resume_on_three(rank, world_size, scene, data_run),
            "subgrid": resume_subgrid_on_three(rank, world_size, scene, subgrid_run)}


def test_resume_two_ranks_on_three(two_rank_run, balanced_run, demo_scene, tmp_path):
    """Data parallel and subgrid checkpoints of 2 ranks resumed on 3 (one spawn for both)."""
    run_dir, _, meta = two_rank_run
    three = run_ranks(_resume_both_on_three, 3, tmp_path, str(demo_scene), str(run_dir), str(balanced_run["run"]))
    data = [r["data"] for r in three]
    assert [r["start"] for r in data] == [SAVE_AT] * 3
    assert [r["step"] for r in data] == [SAVE_AT + 2] * 3
    assert sum(r["first_step_rays"] for r in data) == meta["trainer_state"]["n_rays"]
    assert [r["batch_scale"] for r in data] == [2.0] * 3  # later batches keep the 2-rank global target
    assert torch.equal(data[0]["param0"], data[2]["param0"])

    single = balanced_run["single"]
    for rank, r in enumerate(r["subgrid"] for r in three):
        assert r["start"] == 12 and r["step"] == 14 and r["n_rays"] == single["n_rays"]  # step count and batch kept
        assert r["boxes"] == single["boxes"]  # the checkpoint's occupancy cut
        assert r["owners"] == [0, 0, 1, 2]  # re-assigned for three ranks
        assert r["local"] == [k for k, o in enumerate(r["owners"]) if o == rank]
        assert r["losses"] == pytest.approx(single["next_losses"], rel=1e-6, abs=0)  # the uninterrupted run


def test_resume_from_a_folder_without_checkpoints_is_an_error(demo_scene, tmp_path):
    trainer = DataParallelTrainer(tiny_config(), load_scene(demo_scene))
    with pytest.raises(SnapshotError, match="no complete checkpoint found"):
        trainer.load_checkpoint(tmp_path)
    with pytest.raises(SnapshotError, match=r"nothere.pt: not found \(--resume takes a run directory"):
        trainer.load_checkpoint(tmp_path / "nothere.pt")
    snapshot = tmp_path / "single.pt"
    snapshot.write_bytes(b"a single-process snapshot file")
    with pytest.raises(SnapshotError, match=r"single.pt: a single-process snapshot; .* without --nproc-per-node"):
        trainer.load_checkpoint(snapshot)
    trainer.close()


def test_resuming_a_checkpoint_with_fewer_steps_than_it_holds_is_refused(two_rank_run, demo_scene, tmp_path):
    import subprocess
    import sys

    run_dir, _, meta = two_rank_run
    config = tmp_path / "config.json"
    config.write_text(json.dumps(meta["config"]))
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(config), "--scene", str(demo_scene), "--resume", str(run_dir),
         "--n-steps", "2", "--no-eval", "--out", str(tmp_path / "more")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    newest = run_dir / "checkpoints" / f"step_{SAVE_AT:07d}"
    assert proc.stderr.strip().endswith(f"error: training.n_steps: 2 is below step {SAVE_AT} of the checkpoint "
                                        f"{newest}; give --n-steps {SAVE_AT} or more"), proc.stderr
    assert not (tmp_path / "more").exists()  # refused by the start checks, before the run folder is written


def test_partial_folders_of_killed_writes_are_not_checkpoints_and_go_once_a_newer_one_is_complete(tmp_path):
    from trainer.run.checks import check_before_start
    from trainer.contract.config import TrainConfig, apply_overrides
    from trainer.contract.errors import ConfigError

    run = RunDir(tmp_path)
    (tmp_path / "status.json").write_text('{"state": "interrupted"}')
    killed = run.checkpoints_dir / "step_0000004.partial"  # killed during the DCP save: no marker
    killed.mkdir(parents=True)
    (killed / "__0_0.distcp").write_bytes(b"half")
    assert ckpt.list_checkpoints(run.checkpoints_dir) == []
    assert ckpt.latest_checkpoint(tmp_path) is None
    scene = tmp_path / "scene"  # a folder the start checks take for a scene: the check here is the run folder's
    scene.mkdir()
    (scene / "transforms.json").write_text("{}")
    cfg = apply_overrides(TrainConfig(), {"data.scene": str(scene)})
    with pytest.raises(ConfigError, match=r"it has no snapshot or checkpoint to resume from"):
        check_before_start(cfg, tmp_path, None)  # the partial folder is no checkpoint to --resume
    ckpt.save_checkpoint(ckpt.checkpoint_dir(run, 2), {"w": torch.zeros(2)}, {}, {"step": 2}, rank=0)
    assert ckpt.prune_checkpoints(run.checkpoints_dir, keep=3) == []  # step 4's write is newer: kept
    ckpt.save_checkpoint(ckpt.checkpoint_dir(run, 6), {"w": torch.ones(2)}, {}, {"step": 6}, rank=0)
    assert [s for s, _ in ckpt.list_checkpoints(run.checkpoints_dir)] == [2, 6]
    assert ckpt.prune_checkpoints(run.checkpoints_dir, keep=3) == [killed]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["step_0000002", "step_0000006"]


@pytest.mark.parametrize("save_fails", [False, True])
def test_a_ctrl_c_during_the_periodic_checkpoint_waits_for_its_end(save_fails):
    """Ctrl-C while the ranks write a checkpoint: the write is not cut (torch's distributed
    checkpoint would swallow the KeyboardInterrupt and wait on stopped peers); the interrupt comes
    after it, and a write that peers stopping for that signal broke ends as the interrupt."""
    import os
    import signal
    import types

    written = []

    def save_checkpoint():
        os.kill(os.getpid(), signal.SIGINT)  # delivered inside the write
        if save_fails:
            raise RuntimeError("[gloo] Connection closed by peer")
        written.append("done")

    trainer = types.SimpleNamespace(save_checkpoint=save_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        DataParallelTrainer.periodic_save(trainer)
    assert written == ([] if save_fails else ["done"])


def test_a_failed_periodic_checkpoint_without_a_signal_raises_its_error():
    import types

    def save_checkpoint():
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        DataParallelTrainer.periodic_save(types.SimpleNamespace(save_checkpoint=save_checkpoint))

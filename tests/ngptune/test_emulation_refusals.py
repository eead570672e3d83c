"""Edge cases of ``--emulate-interconnect`` on ``ngptune train`` / ``ngptune profile`` and of
``--bench-comm-csv`` tables: emulation on gloo is one error before any rank or folder exists,
Ctrl-C of a multi-rank launch (``python -m trainer``, which ``ngptune train`` runs) is one line,
odd numbers in a bench-comm table are named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ngptune.cli import main
from ngptune.commbench import COLUMNS
from ngptune.profiling.link import LinkBandwidthError, read_link_busbw
from trainer.launch_cli import main as launcher_main

pytestmark = pytest.mark.timeout(120)

GLOO = "distributed.emulate_interconnect: '{}' works through NCCL variables, but this run uses the gloo backend (CPU); " \
       "use 'none' or train on GPUs"


@pytest.mark.parametrize("link", ["pcie", "sockets", "nvlink"])
def test_multi_rank_train_refuses_emulation_on_gloo_before_the_ranks_start(link, tmp_path, capfd):
    out = tmp_path / "run"
    argv = ["train", "--nproc-per-node", "2", "--emulate-interconnect", link, "--set", "training.device=cpu",
            "--n-steps", "1", "--out", str(out)]
    assert main(argv) == 2
    err = capfd.readouterr().err.strip()
    assert err == "error: " + GLOO.format(link)  # once, not once per rank and again from the launcher
    assert not out.exists()


@pytest.mark.parametrize("command", ["train", "profile"])
def test_more_ranks_than_cpu_cores_are_refused_before_anything_starts(command, tmp_path, capfd):
    from trainer.contract.threads import available_cores

    cores = available_cores()
    out = tmp_path / "out"
    argv = [command, "--nproc-per-node", str(cores + 1), "--set", "training.device=cpu", "--out", str(out),
            *(["--n-steps", "1"] if command == "train" else ["--steps", "1"])]
    assert main(argv) == 2
    assert capfd.readouterr().err.strip() == (
        f"error: --nproc-per-node {cores + 1}: this CPU run would start {cores + 1} ranks on {cores} CPU "
        f"core{'s' if cores != 1 else ''}; expected at most {cores} (one rank per core)")
    assert not out.exists()


def test_profile_refuses_emulation_on_gloo_before_it_writes(tmp_path, capfd):
    out = tmp_path / "profile"
    argv = ["profile", "--emulate-interconnect", "pcie", "--set", "training.device=cpu", "--steps", "1",
            "--out", str(out)]
    assert main(argv) == 2  # was 1, after a failed training run and a "partial profile"
    assert capfd.readouterr().err.strip() == "error: " + GLOO.format("pcie")
    assert not out.exists()


def test_ctrl_c_of_a_multi_rank_train_says_no_checkpoint_was_kept(tmp_path, monkeypatch, capfd):
    import trainer.parallel.launch

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer.parallel.launch, "launch_workers", interrupted)
    out = tmp_path / "run"
    try:
        code = launcher_main(["--nproc-per-node", "2", "--n-steps", "1", "--out", str(out)])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt left python -m trainer as a traceback")
    assert code == 130
    said = capfd.readouterr().err.strip().splitlines()
    assert " ".join(" ".join(said).split()) == (
        f"interrupted: the ranks were stopped; logs in {out / 'logs'} "
        f"no snapshot or checkpoint was kept in {out} (--checkpoint-every N keeps one along the way)")
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in said), said


def _table(path: Path, **changes: str) -> Path:
    row = {"size_bytes": "67108864", "count": "16777216", "op": "all_reduce", "time_us": "100.0",
           "algbw_gb_per_s": "5.0", "busbw_gb_per_s": "5.0", "settings": "default",
           "emulated_interconnect": "none", "backend": "gloo", "world_size": "2", **changes}
    pd.DataFrame([row], columns=list(COLUMNS)).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("column", "value"), [("world_size", "1.5"), ("size_bytes", "67108864.5")])
def test_a_fractional_world_size_or_size_is_named(column, value, tmp_path):
    path = _table(tmp_path / "comm.csv", **{column: value})
    with pytest.raises(LinkBandwidthError, match=rf"comm.csv: row 1: {column} must be a positive integer, got '{value}'$"):
        read_link_busbw(path, emulated_interconnect="none", world_size=2)
    assert read_link_busbw(_table(tmp_path / "good.csv"), emulated_interconnect="none", world_size=2)[0] == 5.0


def test_a_folder_given_as_the_table_is_named_as_a_folder(tmp_path):
    with pytest.raises(LinkBandwidthError, match=r": is a folder, expected the CSV file ngptune bench-comm --csv wrote$"):
        read_link_busbw(tmp_path, emulated_interconnect="none", world_size=2)


def test_ctrl_c_after_a_checkpoint_says_how_to_continue(tmp_path, monkeypatch, capfd):
    import torch

    import trainer.parallel.launch
    from trainer.parallel import checkpoint as ckpt
    from trainer.contract.rundir import RunDir

    out = tmp_path / "run"

    def interrupted_after_a_save(*args, **kwargs):
        ckpt.save_checkpoint(ckpt.checkpoint_dir(RunDir(out), 5), {"w": torch.zeros(1)}, {}, {"step": 5}, rank=0)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer.parallel.launch, "launch_workers", interrupted_after_a_save)
    assert launcher_main(["--nproc-per-node", "2", "--n-steps", "10", "--keep-checkpoints", "4", "--out", str(out)]) == 130
    said = capfd.readouterr().err.strip().splitlines()
    assert " ".join(" ".join(said[:-2]).split()) == (
        f"interrupted: the ranks were stopped; logs in {out / 'logs'} "
        f"the newest complete checkpoint is {out / 'checkpoints' / 'step_0000005'} (step 5)")
    assert said[-2:] == [  # the command whole on its own line, to be copied
        "  continue with:",
        f"    ngptune train --nproc-per-node 2 --config {out / 'config.json'} --resume {out} --out {out} "
        "--keep-checkpoints 4"]  # a flag config.json does not keep is repeated
    assert all(len(line) <= 80 for line in said[:-1] if len(line.split()) > 2), said

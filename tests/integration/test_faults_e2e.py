"""Faults of real training jobs through ``ngptune train --nproc-per-node 2`` (gloo, CPU): a rank
SIGKILLed mid-training resumes from the newest checkpoint under ``--max-restarts``, a simulated
CUDA OOM is named with its rank, and bad parallel settings are refused before any worker starts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import wait_for_job
from tests.support.scenes import tiny_flags
from trainer.parallel.checkpoint import COMPLETE_MARKER
from trainer.parallel.rank_log import restart_line
from trainer.contract.rundir import RunDir
from trainer.contract.metrics import read_metrics
from trainer.contract.textlines import joined


pytestmark = pytest.mark.timeout(150)


def _train_argv(scene: Path, run: Path, *extra: str) -> list[str]:
    return ["train", "--nproc-per-node", "2", "--scene", str(scene), "--out", str(run), *tiny_flags(), "--quiet",
            "--no-eval", "--set", "distributed.timeout_s=30", *extra]


def test_sigkilled_rank_restarts_and_resumes_from_the_newest_checkpoint(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run")
    n_steps = 20
    argv = _train_argv(demo_scene, run.root, "--n-steps", str(n_steps), "--checkpoint-every", "10",
                       "--max-restarts", "1", "--set", "faults.data_delay_ms=100")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "ngptune", *argv], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        checkpoint = run.checkpoints_dir / "step_0000010" / COMPLETE_MARKER

        def logged_step_15() -> bool:  # after the checkpoint at step 10: steps 11-15 will be lost
            path = run.metrics_path(1)
            return checkpoint.is_file() and path.is_file() and '"step": 15' in path.read_text()

        wait_for_job(logged_step_15, 90, "rank 1's record of step 15", proc)
        header = run.log_path(1).read_text().splitlines()[0]
        pid = int(re.search(r" pid (\d+):", header).group(1))
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["state"] == "completed"
    status = run.read_status()
    assert status["state"] == "completed" and status["step"] == n_steps and status["world_size"] == 2
    assert status["resumed_from"] == str(run.checkpoints_dir / "step_0000010")
    assert status["restart_count"] == 1 and status["resumed_from_step"] == 10
    lines = out.splitlines()  # the console names the restart and the checkpoint, in that order
    restart = lines.index(restart_line(1, 1))
    resumed = (f"resumed from checkpoint {run.checkpoints_dir / 'step_0000010'} at step 10 after restart 1")
    first_step = next(i for i in range(restart + 1, len(lines)) if lines[i].startswith("rank 0: step "))
    # after the scene's notes, before the first step; its lines fit 80 columns: read as one text
    assert resumed in " ".join(" ".join(lines[restart + 1:first_step]).replace("rank 0: ", " ").split()), out
    summary = " ".join(out.split())  # the summary's lines fit 80 columns: read as one text
    assert f"after 1 restart (resumed from {run.checkpoints_dir / 'step_0000010'} at step 10)" in summary
    for rank in range(2):
        log = run.log_path(rank).read_text()
        assert f"=== rank {rank}/2 local rank {rank} attempt 0 pid" in log
        assert f"=== rank {rank}/2 local rank {rank} attempt 1 pid" in log
        records = read_metrics(run.metrics_path(rank), require_contiguous_steps=True)
        assert [r["step"] for r in records] == [5, 10, 15, 20]  # attempt 0's record of step 15 dropped
    assert time.monotonic() - killed_at < 120


def test_simulated_oom_names_the_rank_and_the_oom(demo_scene, tmp_path, capfd):
    from ngptune.cli import main

    run = RunDir(tmp_path / "run")
    argv = _train_argv(demo_scene, run.root, "--n-steps", "10", "--set", "faults.oom_at_step=3",
                       "--set", "faults.ranks=[1]")
    t0 = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - t0 < 60  # well within distributed.timeout_s after the fault
    err = capfd.readouterr().err
    message = ("rank 1 ran out of memory (OutOfMemoryError: CUDA out of memory. (simulated by "
               "faults.oom_at_step=3 on rank 1))")
    assert f"error: {message}" in err
    assert f"log: {run.log_path(1)}" in err and f"last lines of {run.log_path(1)}" in err
    status = run.read_status()
    assert status["state"] == "failed" and status["reason"].startswith(message)
    assert status["failed_rank"] == 1 and status["failed_log"] == str(run.log_path(1))
    assert "torch.OutOfMemoryError: CUDA out of memory. (simulated" in run.log_path(1).read_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["--set", "parallel.mode=subgrid", "--set", "parallel.num_subgrids=1"],
         "error: parallel.num_subgrids: expected at least one box per rank (>= world size 2) in subgrid mode, got 1"),
        (["--set", 'distributed.gpu_capabilities=[{"rank": 0, "compute_power": 1}, {"rank": 2, "compute_power": 1}]'],
         "error: distributed.gpu_capabilities[1].rank: expected a rank < world size (2), got 2"),
        (["--set", "distributed.world_size=3"],
         "error: distributed.world_size: config says 3 but 2 processes were started"),
        (["--set", "faults.ranks=[5]"],
         "error: faults.ranks[0]: expected a rank < world size (2), got 5"),
        (["--set", "encoding.table_dtype=float16"],
         "error: encoding.table_dtype: training needs 'float32' tables, got 'float16' (float16 tables are for the "
         "encoding kernels and bench/encoding.py: Adam's moments and its epsilon underflow in float16 and the loss "
         "turns NaN)"),
        (["--set", "distributed.timeout_s=1e15"],
         "error: --set distributed.timeout_s: expected a number in (0, 2000000], got 1000000000000000.0"),
    ],
    ids=["num_subgrids", "gpu_capabilities", "world_size", "faults_ranks", "table_dtype", "timeout_s"],
)
def test_bad_parallel_settings_are_refused_before_any_worker_starts(demo_scene, tmp_path, capfd, settings, expected):
    from ngptune.cli import main

    run = tmp_path / "run"
    assert main(_train_argv(demo_scene, run, *settings)) == 2
    assert capfd.readouterr().err.strip() == expected
    assert not run.exists()


@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_keep_checkpoints_below_one_is_refused_at_once(demo_scene, tmp_path, capfd, value):
    from ngptune.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(_train_argv(demo_scene, tmp_path / "run", "--keep-checkpoints", value))
    assert exit_info.value.code == 2
    assert "--keep-checkpoints: expected an integer >= 1" in capfd.readouterr().err
    assert not (tmp_path / "run").exists()


def test_resume_source_after_a_restart_is_the_newest_checkpoint(tmp_path, monkeypatch):
    import torch

    from trainer.run.checks import resume_source
    from trainer.parallel import checkpoint as ckpt

    source, own = RunDir(tmp_path / "source"), RunDir(tmp_path / "own")
    for run, step in ((source, 200), (own, 350)):
        ckpt.save_checkpoint(ckpt.checkpoint_dir(run, step), {"w": torch.zeros(1)}, {}, {"step": step}, rank=0)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert resume_source(source.root, own) == source.root  # first attempt: what the user asked for
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert resume_source(source.root, own) == ckpt.checkpoint_dir(own, 350)  # restart: no steps redone
    assert resume_source(None, own) == own.root
    assert resume_source(source.root, RunDir(tmp_path / "fresh")) == source.root
    ckpt.save_checkpoint(ckpt.checkpoint_dir(source, 400), {"w": torch.zeros(1)}, {}, {"step": 400}, rank=0)
    assert resume_source(source.root, own) == source.root  # the source is further on


def test_two_nodes_meet_through_ngptune_train(demo_scene, tmp_path):
    # Every node's launcher must name the same rendezvous (a random id per node never met); the
    # config's distributed.master_addr:master_port is the endpoint when no flag gives one.
    from trainer.parallel.dist_env import free_port

    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = RunDir(tmp_path / "run")
    procs = []
    for node in (0, 1):
        # node 0 names the endpoint on the command line, node 1 takes it from its config
        where = ["--rdzv-endpoint", endpoint] if node == 0 else ["--set", f"distributed.master_port={port}"]
        argv = ["train", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node), *where,
                "--scene", str(demo_scene), "--out", str(run.root), *tiny_flags(), "--quiet", "--no-eval",
                "--n-steps", "4", "--set", "distributed.timeout_s=60"]
        procs.append(subprocess.Popen([sys.executable, "-m", "ngptune", *argv], cwd=REPO, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outputs = [p.communicate(timeout=120) for p in procs]
    for node, (p, (_, err)) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"node {node}: {err[-2000:]}"
    status = run.read_status()
    assert status["state"] == "completed" and status["world_size"] == 2 and status["step"] == 4
    assert "trained to step 4 in " in outputs[0][0]  # node 0 sums the run up; the ranks' logs have the rest
    assert json.loads(outputs[0][0].strip().splitlines()[-1])["state"] == "completed"  # the JSON line stays last


def test_a_distributed_resume_with_other_settings_warns_on_the_terminal(demo_scene, tmp_path, capfd):
    from ngptune.cli import main

    run = tmp_path / "run"
    assert main(_train_argv(demo_scene, run, "--n-steps", "3")) == 0
    capfd.readouterr()
    assert main(_train_argv(demo_scene, run, "--n-steps", "4", "--resume", str(run), "--set", "loss.otype=Huber")) == 0
    err = capfd.readouterr().err
    said = err.splitlines()
    start = max(i for i, line in enumerate(said) if line.startswith("warning:"))
    warning = said[start:]  # the last warning and the lines that go on from it, refitted by the launcher
    assert "resuming with settings other than it was trained with: loss.otype: 'L2' → 'Huber'" in joined(warning), err
    assert all(len(line) <= 79 for line in warning if " " in line.strip()), warning  # a long path stays whole
    assert err.strip().endswith("(rank 0)")

"""The one-node launcher without torch (trainer/parallel/local_launch.py through launch_workers):
the launching process never imports torch (``python -m trainer --nproc-per-node 2`` on the demo
scene, checked in a child process), the variables each rank gets, a rendezvous port that another
process takes before rank 0 binds it, SIGINT / SIGTERM to the launcher stopping the ranks, and the
CUDA device count known without torch."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainer.parallel.launch as launch
from tests.support.paths import REPO
from tests.support.scenes import tiny_flags
from trainer.parallel.local_launch import rank_environment

WORKER = str(REPO / "tests" / "support" / "launch_worker.py")

pytestmark = pytest.mark.timeout(120)

_TRAIN_AND_REPORT = """
import json, sys
from trainer.launch_cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules}))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                PYTHONUNBUFFERED="1")


def test_a_two_rank_training_leaves_torch_unimported_in_the_launcher(demo_scene, tmp_path):
    run = tmp_path / "run"
    argv = ["--nproc-per-node", "2", "--scene", str(demo_scene), "--out", str(run), *tiny_flags(),
            "--n-steps", "3", "--no-eval", "--quiet", "--set", "distributed.timeout_s=30"]
    proc = subprocess.run([sys.executable, "-c", _TRAIN_AND_REPORT, *argv], cwd=REPO, env=_env(), text=True,
                          capture_output=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"rc": 0, "torch": False}
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    for rank in range(2):
        log = (run / "logs" / f"rank{rank}.log").read_text()
        assert log.startswith(f"=== rank {rank}/2 local rank {rank} attempt 0 pid ")


def test_each_rank_gets_the_variables_torchrun_gives(tmp_path):
    env = rank_environment(1, 3, master_addr="127.0.0.1", master_port=29511, run_id="abc",
                           error_file=tmp_path / "e.json")
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                                "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                                "TORCHELASTIC_ERROR_FILE")} == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "0",
        "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511",
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "abc",
        "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_ERROR_FILE": str(tmp_path / "e.json")}


def test_a_port_taken_before_rank_0_binds_it_starts_the_ranks_again(tmp_path, monkeypatch, capfd):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        given = []
        real_free_port = launch.free_port

        def first_a_taken_port(host: str = "127.0.0.1") -> int:
            given.append(taken if not given else real_free_port(host))
            return given[-1]

        monkeypatch.setattr(launch, "free_port", first_a_taken_port)
        rc = launch.launch_workers([WORKER, "--run-dir", str(tmp_path), "--steps", "2", "--timeout-s", "30"], 2,
                                   run_dir=tmp_path, timeout_s=30)
    assert rc == 0
    assert len(given) == 2 and given[0] == taken and given[1] != taken
    err = capfd.readouterr().err
    assert f"warning: another process took port {taken} before rank 0 could host the rendezvous there" in err
    for rank in range(2):
        assert json.loads((tmp_path / f"result.rank{rank}.json").read_text())["sums"]["1"] == [3.0, 2.0]
        log = (tmp_path / "logs" / f"rank{rank}.log").read_text()
        assert log.count("=== rank") == 1  # the second start's log replaced the first's


_LAUNCH_AND_REPORT = """
import json, sys
from pathlib import Path
from trainer.contract.errors import LaunchError
from trainer.parallel.launch import launch_workers
run = Path(sys.argv[1])
try:
    launch_workers([sys.argv[2], "--run-dir", str(run), "--steps", "3", "--fail-rank", "1", "--fail-step", "1",
                    "--fail-mode", "sleep", "--timeout-s", "60"], 2, run_dir=run, timeout_s=60)
    outcome = "finished"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
except LaunchError as exc:
    outcome = str(exc)
print(json.dumps({"outcome": outcome, "torch": "torch" in sys.modules}))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_stops_the_ranks(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCH_AND_REPORT, str(tmp_path), WORKER], cwd=REPO, env=_env(),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "fault_time.json").is_file():  # rank 1 sleeps, rank 0 waits for it
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        pids = [int(re.search(r" pid (\d+):", (tmp_path / "logs" / f"rank{r}.log").read_text()).group(1))
                for r in range(2)]
        assert all(_alive(p) for p in pids)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    report = json.loads(out.strip().splitlines()[-1])
    expected = ("KeyboardInterrupt" if sig == signal.SIGINT
                else f"the launcher received SIGTERM; workers in {tmp_path / 'logs'} were stopped")
    assert report == {"outcome": expected, "torch": False}, err
    assert not any(_alive(p) for p in pids)
    # Ctrl-C is passed on as SIGINT (the sleeping rank raises KeyboardInterrupt), SIGTERM as SIGTERM
    assert ("KeyboardInterrupt" in (tmp_path / "logs" / "rank1.log").read_text()) == (sig == signal.SIGINT)


@pytest.mark.parametrize("nproc, stop, code, heading, rank0", [
    (2, "ctrl-c", 130, "interrupted: the ranks were stopped; logs in", "interrupted"),  # a terminal's Ctrl-C
    (2, "sigterm", 143, "terminated (SIGTERM): the ranks were stopped; logs in", "terminated"),  # timeout, SLURM
    (1, "sigterm", 143, "terminated (SIGTERM): the ranks were stopped; logs in", "terminated"),
    (2, "sigterm-ranks", 2, "error: rank ", "terminated"),  # an operator signalling the ranks alone: a failure
])
def test_a_stopped_launched_training_says_how_to_continue_once(demo_scene, tmp_path, nproc, stop, code, heading,
                                                               rank0):
    """Ctrl-C reaches the launcher (the ranks run in sessions of their own), which passes it on:
    rank 0 and ``status.json`` say interrupted, as one process does after Ctrl-C; SIGTERM to the
    launcher stops the ranks as terminated; SIGTERM to the ranks alone fails the run (the model
    kept). Rank 0's lines are repeated on the launcher's console, so rank 0 says only where it
    stopped, and the launcher, once every rank has stopped, says what was kept and how to continue:
    once, not twice, and not never."""
    from trainer.contract.resumption import newest_model
    from trainer.contract.rundir import RunDir

    run = tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", "--nproc-per-node", str(nproc), "--scene", str(demo_scene), "--out",
            str(run), *tiny_flags(), "--n-steps", "100000", "--no-eval", "--set", "distributed.timeout_s=30",
            "--set", "training.log_every=5", "--checkpoint-every" if nproc > 1 else "--snapshot-every", "5"]
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while newest_model(RunDir(run)) is None:  # a model kept, so there is a run to continue
            assert proc.poll() is None and time.monotonic() < deadline, "no model kept in 90 s"
            time.sleep(0.2)
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        elif stop == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            for rank in range(nproc):
                log = (run / "logs" / f"rank{rank}.log").read_text()
                os.kill(int(re.search(r" pid (\d+):", log).group(1)), signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    said = out + err
    assert proc.returncode == code, said[-3000:]
    assert re.search(rf"rank 0: {rank0}: the run stopped at step \d+", out), said[-3000:]
    assert said.count("continue with:") == 1 and "no snapshot or checkpoint was kept" not in said, said[-3000:]
    # the heading is fitted to 80 columns: where it breaks depends on the length of the logs' path
    assert heading in " ".join(err.split()) and "Traceback" not in said, err
    assert ("error:" in err) == (stop == "sigterm-ranks"), err
    if stop != "sigterm-ranks":  # stopped by the launcher: interrupted, the reason in the launcher's signal's words
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "interrupted", status
        assert status["reason"].startswith("terminated") == (stop == "sigterm"), status


@pytest.mark.parametrize("before, after", [
    ({"state": "failed", "reason": "RuntimeError: [gloo] Connection closed by peer"}, "interrupted"),
    ({"state": "running"}, "interrupted"),
    ({"state": "interrupted", "reason": "terminated by signal 15 after step 70"}, "interrupted"),
    ({"state": "completed"}, "completed"),
    ({"state": "diverged", "reason": "loss is nan"}, "diverged"),
])
def test_a_run_whose_ranks_the_launcher_stopped_reads_as_interrupted(tmp_path, before, after):
    """Rank 0 cut off inside a collective by a peer that stopped first wrote ``failed`` (a gloo
    error); after the launcher stopped the ranks on purpose the run reads ``interrupted``, rank
    0's own reason kept. A state rank 0 ended in by itself stays."""
    from trainer.contract.rundir import RunDir
    from trainer.launch_cli import status_of_stopped_run

    run = RunDir(tmp_path)
    run.write_json(run.status_path, {"pid": 1, **before})
    status_of_stopped_run(run, "terminated (SIGTERM)")
    status = run.read_status()
    assert status["state"] == after and status["pid"] == 1
    if before["state"] in ("failed", "running"):
        assert status["reason"].startswith("terminated (SIGTERM): the launcher stopped the ranks")
        assert before.get("reason", "") in status["reason"]
    else:
        assert status.get("reason") == before.get("reason")


_COUNT = ("import json, sys; from trainer.parallel.cuda_count import cuda_device_count, torch_build; "
          "n = cuda_device_count(); print(json.dumps({'count': n, 'build': torch_build(), 'torch': 'torch' in sys.modules}))")


def test_the_cuda_device_count_matches_torch(tmp_path):
    import torch

    proc = subprocess.run([sys.executable, "-c", _COUNT], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["build"] == {"cuda": torch.version.cuda, "hip": torch.version.hip}
    assert report["count"] == torch.cuda.device_count()
    # torch only where neither its build nor the CUDA driver answers (a ROCm build, a driver error)
    assert report["torch"] is (torch.version.hip is not None)

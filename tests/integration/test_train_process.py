"""``ngptune train`` runs ``python -m trainer`` as a process and is, for the user, that program:
the same output and exit status, Ctrl-C and SIGTERM reach the training once and end it as they
would end ``python -m trainer``, and a killed ``ngptune`` leaves no trainer behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO, repo_python_path
from tests.support.scenes import TINY

pytestmark = pytest.mark.timeout(180)


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_print_config_and_refusals_match_python_m_trainer():
    for flags in (["--print-config", "--set", "training.precision=bf16"],
                  ["--print-config", "--set", "encoding.log2_hashmap_size=32"]):
        ours, theirs = _run("ngptune", "train", *flags), _run("trainer", *flags)
        assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    bad = _run("ngptune", "train", "--precision", "fp8")
    assert bad.returncode == 2 and "usage: ngptune train" in bad.stderr and "invalid choice: 'fp8'" in bad.stderr


def _long_run(tmp_path: Path, demo_scene: Path, ignore_sigint: bool = False) -> tuple[subprocess.Popen, Path]:
    """``ngptune train`` of many steps, once it has trained a few (started with SIGINT ignored,
    as a script's background job, with ``ignore_sigint``)."""
    out = tmp_path / "run"
    flags = [f"{key}={json.dumps(value)}" for key, value in {**TINY, "training.log_every": 1}.items()]
    argv = [sys.executable, "-m", "ngptune", "train", "--scene", str(demo_scene), "--n-steps", "100000",
            "--no-eval", "--quiet", "--out", str(out), *sum((["--set", f] for f in flags), [])]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "metrics.jsonl").is_file():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return proc, out


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _children(pid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and (f := _stat(int(e))) and int(f[1]) == pid
            and f[0] != "Z"]


@pytest.mark.parametrize("sig, code, said_first, ended", [
    (signal.SIGINT, 130, "Ctrl-C", "interrupted"),
    (signal.SIGTERM, 143, "SIGTERM", "terminated"),  # timeout, docker stop, SLURM
])
def test_ctrl_c_or_sigterm_to_ngptune_reaches_the_training_once_and_keeps_the_model(tmp_path, demo_scene, sig, code,
                                                                                     said_first, ended):
    """Without --snapshot-every, Ctrl-C (SIGTERM) finishes the step under way and keeps a snapshot
    of it, which the lines after ``interrupted`` (``terminated``) name and resume (with the run's
    ``--no-eval``, which its ``config.json`` does not keep)."""
    from trainer.train.snapshot import load_snapshot

    proc, out = _long_run(tmp_path, demo_scene)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code and "Traceback" not in stderr
    assert stderr.count(f"{said_first}: stopping after this step, keeping a snapshot of it") == 1
    lines = stderr.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{ended}: the run stopped at step "))
    said = lines[start:]  # where the run stopped, the snapshot kept, how to continue (its command whole)
    step = int(said[0].removeprefix(f"{ended}: the run stopped at step "))
    snapshot = out / "snapshots" / f"step_{step:07d}.pt"
    assert " ".join(" ".join(said[1:-2]).split()) == f"the newest complete snapshot is {snapshot} (step {step})"
    assert said[-2:] == ["  continue with:",
                         f"    ngptune train --config {out / 'config.json'} --resume {snapshot} --out {out} --no-eval"]
    assert all(len(line) <= 80 for line in lines[:-1] if len(line.split()) > 2), stderr
    assert load_snapshot(snapshot)["step"] == step
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted" and status["snapshot"] == str(snapshot)


def test_ctrl_c_reaches_a_training_that_ngptune_started_with_sigint_ignored(tmp_path, demo_scene):
    """A background job of a script starts with SIGINT ignored; ngptune takes SIGINT to pass it
    on, so its trainer takes it too: ``kill -INT`` stops the run after its step, as Ctrl-C does."""
    proc, out = _long_run(tmp_path, demo_scene, ignore_sigint=True)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted: the run stopped at step " in stderr
    assert list((out / "snapshots").glob("step_*.pt"))


def test_a_killed_ngptune_leaves_no_training_behind(tmp_path, demo_scene):
    proc, out = _long_run(tmp_path, demo_scene)
    trainers = _children(proc.pid)
    assert len(trainers) == 1
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(trainers[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(trainers[0]), "the training ran on after ngptune was killed"
    assert json.loads((out / "status.json").read_text())["state"] == "interrupted"


def test_a_sigkilled_run_reads_as_stale_to_the_commands_that_read_its_status(tmp_path, demo_scene, capsys):
    """SIGKILL leaves no chance to write the end: status.json keeps ``running`` with the run's pid,
    and a new run into the folder and render call it stale, naming the dead pid."""
    from tests.support.cli import first_statement, run_inference_cli
    from trainer.contract.config import load_config
    from trainer.contract.errors import ConfigError
    from trainer.run.checks import check_before_start

    out = tmp_path / "run"
    flags = [f"{key}={json.dumps(value)}" for key, value in TINY.items()]
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--scene", str(demo_scene), "--n-steps", "100000",
                             "--snapshot-every", "2", "--no-eval", "--quiet", "--out", str(out),
                             *sum((["--set", f] for f in flags), [])],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "snapshots").glob("step_*.pt")):
        assert proc.poll() is None
        time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=30)
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "running" and status["pid"] == proc.pid
    stale = f"stale: process {proc.pid} no longer exists"
    cfg = load_config(None, {"data.scene": str(demo_scene)})
    with pytest.raises(ConfigError) as again:
        check_before_start(cfg, out, None)
    assert f"already holds a run (its status.json says '{stale}'); choose a new folder, or continue" in str(again.value)
    code, stdout, err = run_inference_cli(["render", out, "--cameras", "orbit", "--frames", "1", "--width", "8",
                                           "--height", "8", "--out", tmp_path / "frames", "--quiet"], capsys)
    assert code == 0 and stdout.startswith("rendering")
    newest = sorted((out / "snapshots").glob("step_*.pt"))[-1]
    warning, _ = first_statement(err)  # in lines under 80 columns where its paths allow
    assert warning == (f"warning: {out / 'status.json'}: the run did not finish: {stale}, killed before "
                                   f"it could write its end; using its newest complete snapshot {newest} "
                                   f"(step {int(newest.stem.removeprefix('step_'))})")


def test_a_trainer_killed_by_sigkill_gets_one_line_and_a_failed_status(tmp_path, demo_scene):
    """The trainer ``ngptune train`` started is SIGKILLed (as the out-of-memory killer does): the
    driver names the process and the signal, where the records and the newest snapshot are and the
    command that continues the run, in one ``error:`` line, and marks the run failed. Without
    ``--out`` it finds the run in ``runs/`` of the working folder."""
    flags = [f"{key}={json.dumps(value)}" for key, value in TINY.items()]
    argv = [sys.executable, "-m", "ngptune", "train", "--scene", str(demo_scene), "--n-steps", "100000",
            "--snapshot-every", "2", "--no-eval", "--quiet", *sum((["--set", f] for f in flags), [])]
    env = {**os.environ, "PYTHONPATH": repo_python_path()}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(tmp_path.glob("runs/*/snapshots/step_*.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    [trainer] = _children(proc.pid)
    os.kill(trainer, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    [out] = [p.resolve() for p in (tmp_path / "runs").iterdir()]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: the trainer (process {trainer}) was killed by SIGKILL, not stopped by ngptune"), line
    newest = sorted((out / "snapshots").glob("step_*.pt"))[-1]
    step = int(newest.stem.removeprefix("step_"))
    for part in (f"; runs/{out.name}/status.json now says failed;", f"its records in runs/{out.name}/metrics.jsonl;",
                 f"the newest complete snapshot is runs/{out.name}/snapshots/{newest.name} (step {step});",
                 f"continue with: ngptune train --config runs/{out.name}/config.json --resume "
                 f"runs/{out.name}/snapshots/{newest.name} --out runs/{out.name} --no-eval"):
        assert part in line, (part, line)
    assert line.endswith(" --no-eval"), line  # the flag config.json does not keep, repeated
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "failed" and status["reason"] == f"process {trainer} was killed by SIGKILL"

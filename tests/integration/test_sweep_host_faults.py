"""A sweep on a bad or busy host: concurrency bounded by the cores and by the study, a bad socket
interface refused once before any launch, a default whose rank is killed from outside run again
(and never compared with while missing)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ngptune.tuning.concurrency import host_cores
from ngptune.tuning.layout import StudyDir
from tests.support.cli import SWEEP, run_command
from tests.support.paths import REPO
from tests.support.processes import processes_mentioning
from tests.support.studies import write_study
from trainer.contract import RunDir


def _trials(out: Path) -> list:
    storage = JournalStorage(JournalFileBackend(str(StudyDir(out).journal_path)))
    return sorted(optuna.load_study(study_name="t", storage=storage).get_trials(), key=lambda t: t.number)


def test_more_ranks_than_cores_are_refused_before_anything_starts(tmp_path, tiny_study):
    cores = host_cores()
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", 64 * cores], timeout_s=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --nproc-per-node {64 * cores}: this host has {cores} CPU "
                                      f"core{'s' if cores != 1 else ''} and no GPU; each gloo rank needs a core of its "
                                      f"own (give --nproc-per-node {cores} or fewer)")
    assert not out.exists()


def test_a_bad_socket_interface_fails_once_before_the_first_trial(tmp_path, tiny_study):
    out = tmp_path / "out"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "no-such-nic0"}
    result = subprocess.run([str(c) for c in SWEEP + ["--study", tiny_study, "--out", out]], capture_output=True,
                            text=True, timeout=120, cwd=REPO, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: pre-flight check before the first trial: GLOO_SOCKET_IFNAME='no-such-nic0' selects no network "
        "interface of ")
    assert lines[0].endswith("; no trial was started")
    assert not out.exists()  # no study, no trial folder


def test_a_million_concurrent_trials_of_a_one_trial_study_run_one(tmp_path, tiny_study):
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "1",
                           "--concurrent-trials", "1000000", "--no-confirm"], timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert "note: --concurrent-trials 1000000: " in text and "trials at once" not in text
    assert [t.state for t in _trials(out)] == [TrialState.COMPLETE]
    assert sorted(p.name for p in StudyDir(out).trials_dir.iterdir() if p.is_dir()) == ["0"]


def _kill_ranks_of(out: Path, numbers: list[int], stop: threading.Event, killed: list[int]) -> None:
    """Kill (SIGKILL, from outside the sweep) rank 0 of each listed trial once it trains."""
    for number in numbers:
        run_dir = str(StudyDir(out).run_dir(number))
        while not stop.is_set():
            ranks = [pid for pid, cmd in processes_mentioning(run_dir) if "trainer.parallel.launch" in cmd]
            if ranks and RunDir(run_dir).log_path(0).is_file():
                os.kill(ranks[0], signal.SIGKILL)
                killed.append(number)
                break
            time.sleep(0.2)


def test_a_default_killed_from_outside_runs_again_and_is_never_skipped(tmp_path, tiny_study):
    out = tmp_path / "out"
    cmd = SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "1", "--no-confirm"]
    # every attempt of the default is killed: the trial and its two retries
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_ranks_of, args=(out, [0, 1, 2], stop, killed), daemon=True)
    killer.start()
    try:
        first = run_command(cmd, timeout_s=400)
    finally:
        stop.set()
        killer.join()
    assert killed == [0, 1, 2], first.stdout + first.stderr
    assert first.returncode == 1, first.stdout + first.stderr  # no trial completed
    trials = _trials(out)
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    for trial in trials:
        assert trial.user_attrs["infrastructure"] is True
        assert "rank 0 was killed by SIGKILL" in trial.user_attrs["reason"]
        assert trial.user_attrs["reason"].endswith("[killed from outside]")
    assert [t.system_attrs.get("retry_history", []) for t in trials] == [[], [0], [0, 1]]
    assert "will run again (at most 2 retries each)" in first.stdout

    # the same command again: the default is missing, so it runs, not "no more to run"
    second = run_command(cmd, timeout_s=400)
    assert second.returncode == 0, second.stdout + second.stderr
    text = " ".join(second.stdout.split())
    assert "no more to run" not in text and "retrying trial 2" in text
    after = _trials(out)
    assert after[3].state == TrialState.COMPLETE and after[3].user_attrs["is_default"] is True
    assert "The default (trial #3) is recommended" in text

"""``ngptune profile``'s choices for the profiled run, without running it: the logging interval
(the trainer's own, shortened for short runs, the user's ``--set`` first), the default
torch.profiler window (steady state, clear of the sampled eager step, clamped into short runs) and
the console summary of a captured and of an eager step."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import pytest

from ngptune.profile_command import (
    MIN_LOG_EVERY,
    TRACE_STEPS,
    default_trace_window,
    profile_log_every,
    register,
    run_config,
    summary_lines,
    trainer_command,
)
from ngptune.profiling.diagnoses import steps_past_occupancy_warmup
from ngptune.profiling.tables import SUMMARY_TABLE
from tests.support.paths import REPO
from trainer.contract import TrainConfig, apply_overrides

pytestmark = pytest.mark.timeout(120)

SMALL = REPO / "configs" / "small.json"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["profile", *argv])


def _config(**overrides) -> TrainConfig:
    return apply_overrides(TrainConfig(), overrides)


def test_the_log_interval_is_the_trainer_s_own_shortened_for_short_runs() -> None:
    assert profile_log_every(5000, 100) == 100  # the trainer's default: 50 records
    assert profile_log_every(600, 100) == 60  # ten records
    assert profile_log_every(30, 100) == MIN_LOG_EVERY == 50  # never below: replays stay the rule
    assert profile_log_every(30, 5) == 5  # a config's own shorter interval is kept
    assert profile_log_every(100_000, 200) == 200


def test_the_profiled_run_logs_every_interval_and_the_user_s_set_wins(tmp_path: Path) -> None:
    args = _args("--config", str(SMALL), "--steps", "600", "--set", "training.device=cpu")
    cfg = run_config(args)
    assert cfg.training.log_every == 50  # small.json's 50 (600 steps would allow 60)
    argv = trainer_command(args, tmp_path / "run", (481, 486), log_every=cfg.training.log_every, cuda_profiler_range=False)
    assert "training.log_every=1" not in argv and argv[argv.index("training.log_every=50") - 1] == "--set"
    assert argv[argv.index("--trace-steps") + 1] == "481:486"

    args = _args("--config", str(SMALL), "--steps", "600", "--set", "training.device=cpu", "--set", "training.log_every=7")
    cfg = run_config(args)
    assert cfg.training.log_every == 7
    argv = trainer_command(args, tmp_path / "run", (0, 5), log_every=cfg.training.log_every, cuda_profiler_range=False)
    sets = [argv[i + 1] for i, flag in enumerate(argv) if flag == "--set" and argv[i + 1].startswith("training.log_every=")]
    assert sets[-1] == "training.log_every=7"  # the user's --set comes last: the trainer takes it


@pytest.mark.parametrize("load", ["0", "3.8"])
def test_the_first_line_says_the_device_and_the_threads(tmp_path: Path, monkeypatch, capsys, demo_scene,
                                                        load: str) -> None:
    """``ngptune profile``'s first line, before anything runs: the steps, the device, the ranks and
    the threads of each, in the words of train's, render's and export's first line."""
    import ngptune.profile_command as profile_command
    from tests.support.cli import first_statement
    from trainer.contract import LOAD_ENV, available_cores, describe_cpu_threads

    class Started(Exception):
        """The profiled run would start here."""

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setenv(LOAD_ENV, load)
    monkeypatch.setattr(profile_command, "RunWatcher", started)
    args = _args("--scene", str(demo_scene), "--config", str(SMALL), "--steps", "30", "--set", "training.device=cpu",
                 "--set", "training.cpu_threads=0", "--out", str(tmp_path / "p"))
    with pytest.raises(Started):
        profile_command.profile_command(args)
    said = capsys.readouterr().out
    statement, n = first_statement(said)
    threads = describe_cpu_threads(0, 1)
    assert statement.startswith(f"profile: 30 steps on cpu, 1 rank, {threads}, a metrics record every "), said
    assert "; trainer output in " in statement, said
    cores = available_cores()
    assert (f"({cores} cores, load 3.8)" if load == "3.8" and cores > 1 else f"({cores} cores // 1 rank)") in statement
    assert all(len(line) <= 79 for line in said.splitlines()[:n] if " " in line.strip()), said


def test_the_default_trace_window_lies_in_the_steady_state() -> None:
    cfg = _config()  # occupancy warm-up 256 steps, log_every 100
    assert default_trace_window(5000, cfg) == (4001, 4006)  # the last fifth, after the sampled eager step 4000
    assert default_trace_window(600, _config(**{"training.log_every": 60})) == (481, 486)
    for steps, log_every in ((5000, 100), (600, 60), (2000, 50), (1234, 100), (777, 50)):
        cfg = _config(**{"training.log_every": log_every})
        start, stop = default_trace_window(steps, cfg)
        assert stop - start == TRACE_STEPS and stop <= steps
        assert start >= steps - steps // 5 and start >= steps_past_occupancy_warmup(cfg)
        assert all(step % log_every for step in range(start, stop))  # graph replays only, no sampled eager step


def test_the_default_trace_window_is_clamped_into_short_runs() -> None:
    cfg = _config(**{"training.log_every": 50})
    assert default_trace_window(30, cfg) == (25, 30)  # the run never leaves the warm-up: its last steps
    assert default_trace_window(8, cfg) == (3, 8)
    assert default_trace_window(1, cfg) == (0, 1)
    # one record per step (the user's --set): every step is sampled, the window is not moved
    cfg = _config(**{"training.log_every": 1})
    assert default_trace_window(5000, cfg) == (4000, 4005)


def _summary(kind: str, coverage: float) -> pd.DataFrame:
    captured = kind == "captured"
    return pd.DataFrame({"rank": [0], "steps": [5000], "step_kind": [kind], "step_time_ms": [3.5],
                         "steps_per_s": [1e3 / 3.5], "compute_ms": [7.9 if captured else 2.6], "wait_ms": [0.0],
                         "data_ms": [0.9 if captured else 0.5], "occupancy_update_ms": [0.2],
                         "other_ms": [float("nan") if captured else 0.2],
                         "throughput_samples_per_s": [7.5e7], "rays_per_s": [1.2e6], "phase_coverage": [coverage]},
                        columns=list(SUMMARY_TABLE))


def _statements(lines: list[str]) -> list[str]:
    """The summary's statements: a line that starts with two spaces goes on with the one before it."""
    assert all(len(line) < 80 for line in lines), lines  # an 80-column terminal
    joined: list[str] = []
    for line in lines:
        if line.startswith("  ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


def _ms(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"([0-9.]+) ms", text)]


def test_the_console_summary_of_a_captured_step_says_where_its_phases_come_from() -> None:
    """The replays' step time and the sampled eager step's phases are two measurements: each
    statement's parts add up to the total it names."""
    lines = _statements(summary_lines(_summary("captured", float("nan")), [], None))
    assert lines[0] == ("steps: 5000 on 1 rank; step time 3.5 ms, 286 steps/s (captured CUDA graph: the mean over "
                        "every step of the intervals: graph replays, each interval's sampled eager step and the "
                        "occupancy updates, which take 0.2 ms of it), after warm-up")
    assert lines[1] == ("the sampled eager step of each interval, a separate measurement (phase timers on; a replay "
                        "has no phases): its named phases take 8.8 ms: compute 7.9 ms, drawing the batch 0.9 ms, "
                        "waiting for other ranks 0.0 ms")
    total, *parts = _ms(lines[1])
    assert sum(parts) == pytest.approx(total)


def test_the_console_summary_gives_the_parts_that_add_up_to_the_step_time() -> None:
    lines = _statements(summary_lines(_summary("dynamic", 0.95), [], None))
    assert lines[0] == "steps: 5000 on 1 rank; step time 3.5 ms, 286 steps/s, after warm-up"
    assert lines[1] == ("the parts of its 3.5 ms: compute 2.6 ms, drawing the batch 0.5 ms, occupancy update 0.2 ms, "
                        "waiting for other ranks 0.0 ms, outside the named phases 0.2 ms")
    total, *parts = _ms(lines[1])
    assert sum(parts) == pytest.approx(total)


def test_cpu_threads_reach_the_config_and_the_profiled_run(tmp_path: Path) -> None:
    args = _args("--config", str(SMALL), "--steps", "60", "--cpu-threads", "1")
    assert run_config(args).training.cpu_threads == 1
    argv = trainer_command(args, tmp_path / "run", (0, 5), log_every=50, cuda_profiler_range=False)
    assert argv[argv.index("training.cpu_threads=1") - 1] == "--set"
    with pytest.raises(SystemExit):
        _args("--cpu-threads", "-1")


def test_a_scene_folder_of_no_scene_is_refused_before_the_profile_folder(tmp_path: Path, capsys) -> None:
    """A capture's images/ given as the scene, or a format the folder does not hold: one error line,
    exit 2, no profile folder (as train refuses them)."""
    from ngptune.cli import main

    images = tmp_path / "images"
    images.mkdir()
    (images / "0.png").write_bytes(b"")
    assert main(["profile", "--scene", str(images), "--steps", "10", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: {images}: no scene found (looked for ")
    (images / "transforms.json").write_text("{}")
    assert main(["profile", "--scene", str(images), "--format", "blender", "--steps", "10",
                 "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {images}: --format blender: no blender scene here "
                                               "(found: instant-ngp)")
    assert not (tmp_path / "p").exists()

"""ngptune.tuning.lines: the lines the sweep prints fit 80 columns and give each number its unit."""

from __future__ import annotations

from ngptune.tuning.confirm import ConfirmRun
from ngptune.tuning.lines import (
    confirmation_heading, rerun_line, study_heading, trial_end_line, trial_start_line,
)
from trainer.contract import fit_lines, joined

SCENE = "/work/shared/data/nerf_synthetic/lego_with_a_rather_long_folder_name_for_a_scene_copied_here"


def _lines(parts: list[str], indent: str = "  ") -> list[str]:
    lines = fit_lines(parts, indent=indent)
    assert all(len(line) <= 80 or " " not in line.strip() for line in lines), lines  # a long path stays whole
    assert all(line.startswith(indent) for line in lines[1:]), lines
    return lines


def test_the_study_heading_wraps_under_80_columns_and_keeps_the_scene_path_whole() -> None:
    parts = study_heading("demo", "studies/demo.toml", 6, "120 steps (training.max_steps)", 2,
                          "gloo, NCCL parameters inactive", SCENE, "reports/demo/optuna_journal.log", resumed=3,
                          at_once=2, retried=[2, 4])
    lines = _lines(parts)
    assert lines[0].startswith("study demo (studies/demo.toml): 6 trials of 120 steps")
    assert "  " + SCENE + ";" in lines  # on a line of its own, whole
    assert joined(lines).endswith("storage reports/demo/optuna_journal.log; resuming with 3 of 6 trials done or "
                                  "running; 2 trials at once; retrying trials 2, 4")
    one = joined(_lines(study_heading("t", "t.toml", 1, "3 steps", 1, "gloo", "/s", "j.log", resumed=1)))
    assert one == ("study t (t.toml): 1 trial of 3 steps on 1 rank (gloo); scene /s; storage j.log; resuming: "
                   "1 trial done, no more to run (--trials N for more)")


def test_a_trials_settings_wrap_between_settings() -> None:
    values = {"training.target_samples_per_step": 262144, "encoding.log2_hashmap_size": 19, "training.lr": 0.01,
              "NCCL_ALGO": "Ring", "parallel.mode": "subgrid"}
    lines = _lines(trial_start_line(4, False, values))
    assert lines == ["trial 4: training.target_samples_per_step=262144,",
                     "  encoding.log2_hashmap_size=19, training.lr=0.01, NCCL_ALGO=Ring,",
                     "  parallel.mode=subgrid"]
    assert _lines(trial_start_line(0, True, {})) == ["trial 0 (default): base settings"]


def test_a_trials_end_gives_each_value_its_unit_and_consistent_digits() -> None:
    lines = _lines(trial_end_line(3, "completed", 12.345, {"psnr_at_budget_db": 19.3012,
                                                           "throughput_samples_per_s": 6104850.0},
                                  {"psnr_db": 19.3012, "steps": 120, "steps_per_s": 13.0}))
    assert joined(lines) == ("trial 3: completed in 12.3 s: psnr_at_budget_db = 19.30 dB, throughput_samples_per_s "
                             "= 6.10 M samples/s (120 steps, 13.0 steps/s)")
    psnr = joined(_lines(trial_end_line(5, "completed", 9.0, {"time_to_psnr_s": 8.04},
                                        {"psnr_db": 25.126, "steps": 1, "steps_per_s": 10.43})))
    assert psnr == "trial 5: completed in 9.0 s: time_to_psnr_s = 8.0 s, PSNR 25.13 dB (1 step, 10.4 steps/s)"
    trained = joined(_lines(trial_end_line(0, "completed", 6.4, {"psnr_at_budget_db": 20.0},
                                           {"psnr_db": 20.0, "train_time_s": 1.94, "steps": 60, "steps_per_s": 31.0})))
    # the wall time with its seconds of training beside it: start-up and evaluation are the difference
    assert trained == ("trial 0: completed in 6.4 s (1.9 s of training): psnr_at_budget_db = 20.00 dB "
                       "(60 steps, 31.0 steps/s)")
    reason = "invalid combination: " + "a reason that goes on " * 6
    pruned = _lines(trial_end_line(2, "pruned", 0.0, {"psnr_at_budget_db": None}, {}, reason))
    assert joined(pruned) == f"trial 2: pruned in 0.0 s — {reason.strip()}" and len(pruned) == 3


def test_the_confirmation_lines_fit_80_columns() -> None:
    lines = _lines(confirmation_heading(4, 0, 3, "120 steps (training.max_steps)", won=True, reused=5))
    assert joined(lines) == ("confirmation: trial 4 (the runner-up: the default won its single run) and default "
                             "trial 0, 3 re-runs each of 120 steps (training.max_steps) with new seeds, alternating "
                             "(5 of them recorded earlier and reused)")
    assert joined(_lines(confirmation_heading(4, 0, 3, "120 steps", won=False))).endswith(
        "with new seeds, alternating")  # a first confirmation: nothing said of earlier re-runs
    assert joined(_lines(confirmation_heading(4, 0, 4, "120 steps", won=False, reused=8, asked=2))).endswith(
        "(8 of them recorded earlier and reused) (--confirm-runs 2 asks fewer: every pair recorded earlier counts)")
    run = ConfirmRun("default", 0, 1, 1001, 19.3123, {"psnr_db": 19.3123}, "completed")
    assert _lines(rerun_line(run, "psnr_at_budget_db"), "    ") == [
        "  re-run 1 of trial 0 (the default, seed 1001): completed, PSNR 19.31 dB"]
    timed = ConfirmRun("best", 4, 0, 1000, 8.392, {"psnr_db": 25.0}, "completed")
    assert _lines(rerun_line(timed, "time_to_psnr_s"), "    ") == [
        "  re-run 0 of trial 4 (the candidate, seed 1000): completed,", "    time_to_psnr_s = 8.4 s, PSNR 25.00 dB"]
    failed = ConfirmRun("best", 4, 2, 1002, None, {}, "failed", "out of memory")
    assert _lines(rerun_line(failed, "psnr_at_budget_db"), "    ") == [
        "  re-run 2 of trial 4 (the candidate, seed 1002): failed, no value —", "    out of memory"]


def test_sigterm_to_the_sweep_stops_it_as_ctrl_c_does_and_exits_143(monkeypatch, capsys, tmp_path) -> None:
    """SIGTERM raises SweepTerminated (a KeyboardInterrupt: the running trial is stopped the same
    way); the command says so and exits 143, Ctrl-C 130."""
    import os
    import signal

    import pytest

    import ngptune.tuning.sweep as sweep
    from ngptune import cli

    with pytest.raises(sweep.SweepTerminated):
        with sweep.sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause() if hasattr(signal, "pause") else None
    for raised, code, said in ((sweep.SweepTerminated("signal 15"), 143, "sweep terminated (SIGTERM): "),
                               (KeyboardInterrupt(), 130, "sweep interrupted: ")):
        def stopped(options, raised=raised):
            raise raised

        monkeypatch.setattr(sweep, "run_sweep", stopped)
        assert cli.main(["sweep", "--out", str(tmp_path / "study")]) == code
        out = capsys.readouterr().out
        assert out.startswith(said) and "run the same command again to resume" in out, out

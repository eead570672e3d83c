"""Lines a person reads at the end of a run fit an 80-column terminal: broken between parts,
never inside a quantity, the lines after the first indented."""

from __future__ import annotations

import pytest

from trainer.contract.runstatus import SUMMARY_PREFIX, summary_lines
from trainer.contract.textlines import (LINE_WIDTH, TrainedClock, clock_text, counted, estimate_text, fit_lines, joined,
                                       listed, seconds_text)


def test_parts_are_packed_into_lines_under_80_columns_and_broken_only_between_parts():
    parts = listed([f"quantity {i} is 12.3 ms" for i in range(12)])
    lines = fit_lines(parts)
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines)
    assert all(line.startswith("  quantity ") for line in lines[1:]) and lines[0].startswith("quantity 0 ")
    assert " ".join(line.strip() for line in lines) == " ".join(parts)  # nothing lost, nothing split
    assert fit_lines(["short", "", "line"]) == ["short line"] and fit_lines([]) == []


def test_joined_puts_the_lines_of_a_statement_back_on_one_line():
    parts = listed([f"quantity {i} is 12.3 ms" for i in range(12)])
    assert joined(fit_lines(parts)) == " ".join(parts)
    assert joined(["one line"]) == "one line" and joined([]) == ""


def test_a_count_takes_the_singular_only_for_one():
    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert counted(1, "match", "matches") == "1 match" and counted(3, "match", "matches") == "3 matches"


def test_durations_read_with_one_decimal_and_times_left_as_a_clock():
    assert [seconds_text(s) for s in (183.4712, 13.62, 1.0, 0.35, 0.04213, 0.0)] == [
        "183.5 s", "13.6 s", "1.0 s", "350.0 ms", "42.1 ms", "0.0 ms"]
    assert [clock_text(s) for s in (None, 0.0, 14.4, 59.6, 754.0, 3600.0, 3725.0)] == [
        "-:--", "0:00", "0:14", "1:00", "12:34", "1:00:00", "1:02:05"]


def test_a_part_longer_than_a_line_is_broken_at_its_spaces_and_a_word_is_kept_whole():
    sentence = "the field " * 20
    lines = fit_lines(["diagnosis: x (high):", sentence])
    assert lines[0].startswith("diagnosis: x (high): the field") and all(len(line) <= LINE_WIDTH for line in lines)
    path = "/" + "a" * 100
    assert fit_lines(["model:", path]) == ["model:", f"  {path}"]  # no space to break at: whole
    assert fit_lines(["  try: " + "knob " * 30], indent="    ")[0].startswith("  try: knob")
    with pytest.raises(ValueError, match="width 8"):
        fit_lines(["x"], width=8)


def test_a_runs_summary_fits_80_columns_with_its_quantities_whole():
    status = {"step": 530, "train_time_s": 90.04, "stopped_by": "time_budget", "restart_count": 1,
              "resumed_from": "runs/lego/checkpoints/step_0000400", "resumed_from_step": 400,
              "throughput_samples_per_s": 6_104_850.0, "eval_psnr_db": 23.041, "eval_ssim": 0.8123,
              "eval_split": "test", "eval_time_s": 13.31, "snapshot": "runs/lego/snapshots/step_0000530.pt"}
    lines = summary_lines(status)
    # "the time budget stopped it", not how: the stop line says whether a step ran past it or would have
    assert joined(lines).startswith(f"{SUMMARY_PREFIX}530 in 90.0 s (the time budget stopped it),")
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines
    assert all(line.startswith("  ") for line in lines[1:])
    text = " ".join(line.strip() for line in lines)
    for whole in ("6.10 M samples/s,", "PSNR 23.04 dB, SSIM 0.812 (13.3 s),", "model: runs/lego/snapshots/step_0000530.pt"):
        assert any(whole in line for line in lines), whole
    assert "after 1 restart (resumed from runs/lego/checkpoints/step_0000400 at step 400)," in text  # broken at spaces
    assert summary_lines({}) == []
    long_evaluation = summary_lines({**status, "eval_time_s": 182.2})
    assert "SSIM 0.812 (3 min 2 s)," in joined(long_evaluation)  # as the evaluation's own line writes it


def test_a_console_prefix_narrows_the_default_width(monkeypatch):
    from trainer.contract.textlines import CONSOLE_PREFIX_ENV, line_width

    assert line_width({}) == LINE_WIDTH
    assert line_width({CONSOLE_PREFIX_ENV: "rank 0: "}) == LINE_WIDTH - 8
    assert line_width({CONSOLE_PREFIX_ENV: "x" * 200}) == LINE_WIDTH // 2  # never too narrow to use
    parts = ["step 30", "loss 0.02236", "psnr 16.50 dB", "60.4 k samples/s", "334 rays/s", "t=7.6s"]
    monkeypatch.delenv(CONSOLE_PREFIX_ENV, raising=False)
    assert fit_lines(parts, separator="  ") == ["  ".join(parts)]  # 74 columns: one line
    monkeypatch.setenv(CONSOLE_PREFIX_ENV, "rank 0: ")
    lines = fit_lines(parts, separator="  ")
    assert lines == ["  ".join(parts[:-1]), "  t=7.6s"]
    assert all(len("rank 0: " + line) <= LINE_WIDTH for line in lines)


def test_estimates_read_in_seconds_then_minutes_and_seconds():
    """One formatter for every estimate: one decimal under a minute, minutes and seconds above,
    so the evaluation's estimate reads the same before it and beside its measured time."""
    assert [estimate_text(s) for s in (0.0, 0.03, 0.4, 0.9996, 9.1, 9.14, 42.0, 59.94, 59.96, 89.4, 294.0, 3599.4,
                                       5400.0, 7230.0)] == [
        "0.0 ms", "30.0 ms", "400.0 ms", "1.0 s", "9.1 s", "9.1 s", "42.0 s", "59.9 s", "1 min 0 s", "1 min 29 s", "4 min 54 s", "59 min 59 s",
        "1 h 30 min", "2 h 0 min"]


def test_a_long_sentence_is_never_broken_between_a_number_and_its_unit():
    from trainer.contract.textlines import unit_words

    assert unit_words("gain -0.06 dB); 76.2 k samples/s, 3 steps of 12.5 s, 5 % of 2 GB/s, a dB") == [
        "gain", "-0.06 dB);", "76.2 k samples/s,", "3", "steps", "of", "12.5 s,", "5 %", "of", "2 GB/s,", "a", "dB"]
    sentence = ("The default (trial #0) is recommended: no significant difference between trial 4 (the runner-up: "
                "the default won its single run) and the default (gain -0.06 dB); psnr_at_budget_db: trial 4 "
                "19.27 ± 0.17 dB vs default 19.33 ± 0.21 dB")
    lines = fit_lines([sentence])
    assert joined(lines) == sentence and all(len(line) <= LINE_WIDTH for line in lines), lines
    assert not any(line.strip().startswith("dB") for line in lines[1:]), lines  # "-0.06" and "dB)" split before


def test_a_mean_and_its_spread_and_a_numbered_trial_stay_whole():
    from trainer.contract.textlines import unit_words

    assert unit_words("trial 4 19.27 ± 0.17 dB vs default 19.33 ± 0.21 dB") == [
        "trial 4", "19.27 ± 0.17 dB", "vs", "default", "19.33 ± 0.21 dB"]
    assert unit_words("rank 1 of 2, step 40/200") == ["rank 1", "of", "2,", "step 40/200"]


def test_the_trained_clock_runs_on_from_the_last_report_and_counts_from_its_start_before_any(monkeypatch):
    import trainer.contract.textlines as textlines

    now = [100.0]
    monkeypatch.setattr(textlines.time, "perf_counter", lambda: now[0])
    clock = TrainedClock()
    now[0] = 113.0
    assert clock.text() == "0:13"  # start-up: seconds since the clock started
    clock.report(2.0)  # training has run 2 s
    now[0] = 120.0
    assert clock.text() == "0:09"  # 2 s trained + 7 s since that report
    clock.report(None)
    assert clock.text() == "0:20"
    clock.restart()
    now[0] = 125.0
    assert clock.text() == "0:05"

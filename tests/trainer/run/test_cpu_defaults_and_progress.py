"""On a CPU a run without --config takes the CPU preset and says so in its opening line; an
explicit --config is taken as given; off a TTY the run prints progress lines; the evaluation's
estimate is within 2x of its measured time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

from tests.support.paths import REPO
from tests.support.scenes import tiny_config_file
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, estimate_text, joined


def _train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer", "--device", "cpu", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _opening(stdout: str) -> str:
    """The run's opening statement: its first line and the lines that go on from it, joined."""
    lines = stdout.splitlines()
    return joined(lines[:1] + list(takewhile(lambda line: line.startswith(CONTINUATION), lines[1:])))


def test_the_opening_lines_fit_80_columns_and_count_in_words():
    import argparse

    from trainer.contract.config import apply_overrides, load_config
    from trainer.run.settings import opening_line

    cfg = apply_overrides(load_config(None), {"training.device": "cpu", "training.n_steps": 1,
                                              "data.scene": "/data/scenes/a-capture-with-a-long-name/transforms.json"})
    args = argparse.Namespace(config=None, config_chosen=REPO / "configs" / "small.json")
    lines = opening_line(cfg, args, 1).splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines  # one line of 190 columns before
    assert lines[0].startswith("training /data/scenes/a-capture-with-a-long-name/transforms.json on cpu,")
    assert joined(lines).endswith(", up to 1 step")  # not "1 steps"


def test_no_config_on_a_cpu_takes_the_preset_and_says_so(demo_scene, tmp_path):
    out = _train("--scene", str(demo_scene), "--n-steps", "2", "--no-eval", "--out", str(tmp_path / "a"), cwd=REPO)
    assert out.returncode == 0, out.stderr
    first = _opening(out.stdout)
    assert re.match(rf"training {re.escape(str(demo_scene))} on cpu, 1 rank, 1 CPU thread per rank \(training\.cpu_threads\), config .*configs/small\.json "
                    r"\(the CPU preset: no --config on a CPU\), up to 2 steps$", first), first
    preset = json.loads((tmp_path / "a" / "config.json").read_text())
    assert preset["training"]["target_samples_per_step"] == 4096


def test_an_explicit_config_is_taken_as_given(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    out = _train("--scene", str(demo_scene), "--config", str(config), "--n-steps", "2", "--no-eval",
                 "--out", str(tmp_path / "b"), cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert _opening(out.stdout).endswith(f"config {config}, up to 2 steps")
    given = json.loads((tmp_path / "b" / "config.json").read_text())
    assert given["training"]["target_samples_per_step"] == json.loads(config.read_text().split("\n", 1)[1])["training"]["target_samples_per_step"]


def test_eta_counts_the_steps_and_the_time_budget():
    from trainer.run.progress import eta_seconds

    assert eta_seconds(0, 0.0, 100, None) is None
    assert eta_seconds(10, 5.0, 100, None) == 45.0
    assert eta_seconds(10, 5.0, 100, 20.0) == 15.0  # the budget ends first


def test_the_evaluation_says_its_estimate_first_and_its_time_after(tmp_path):
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=64, n_train=8, n_val=1, n_test=3)
    config = tiny_config_file(tmp_path)
    out = _train("--scene", str(scene), "--config", str(config), "--n-steps", "5", "--quiet",
                 "--out", str(tmp_path / "c"), cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    notice = next(i for i, line in enumerate(lines) if line.startswith("evaluating "))
    notice_lines = lines[notice:notice + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION),
                                                             lines[notice + 1:]))
    assert all(len(line) <= LINE_WIDTH for line in notice_lines), notice_lines
    assert re.match(r"evaluating 3 test views \(12\.3 k pixels, 1 render each\), estimated (?:[0-9.]+ s|[0-9]+ min [0-9]+ s|[0-9]+ h [0-9]+ min) "
                    r"\(measured on a sample of its rays\)", joined(notice_lines)), notice_lines  # not 0.01 M pixels
    status = json.loads(out.stdout.strip().splitlines()[-1])
    took, estimate = status["eval_time_s"], status["eval_estimate_s"]
    assert took > 0 and estimate > 0, (estimate, took)  # how close they are: docs/benchmarks.md, a timing
    lines = out.stdout.splitlines()
    result = next(i for i, line in enumerate(lines) if line.startswith("evaluation on "))
    said = f"evaluation on 3 test images in {estimate_text(took)} (estimated {estimate_text(estimate)}):"
    assert lines[result] == said or lines[result].startswith(said + " "), lines[result]
    assert f", estimated {estimate_text(estimate)} (" in joined(notice_lines)  # the same estimate, written alike
    summary = next(i for i, line in enumerate(lines) if line.startswith("trained to step 5 in "))
    assert result < summary and lines[-1].startswith("{")  # readable, then the JSON line
    assert "PSNR " in " ".join(lines[result:result + 2]) and " SSIM " in " ".join(lines[result:result + 2])
    long = [line for line in lines[result:-1] if len(line) >= 80 and " " in line.strip()]  # a long path stays whole
    assert long == [], lines[result:-1]  # an 80-column terminal
    assert all(line.startswith("  ") for line in lines[summary + 1:-1])


def test_a_long_evaluation_says_how_to_shorten_it(demo_scene, monkeypatch):
    import trainer.train.eval_estimate as eval_estimate
    from tests.support.scenes import tiny_config
    from trainer.run.finish import LONG_EVALUATION_S, evaluation_notice
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    monkeypatch.setattr(eval_estimate, "measure_eval_seconds", lambda *args: LONG_EVALUATION_S * 8.7)
    lines = evaluation_notice(trainer).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in lines), lines
    line = joined(lines)
    assert "estimated 1 h 27 min (measured on a sample of its rays)" in line
    assert line.endswith("that is long: Ctrl-C keeps the trained model, and fewer views (--eval-max-images 1) or "
                         "smaller images (--downscale N) shorten it")
    monkeypatch.setattr(eval_estimate, "measure_eval_seconds", lambda *args: 12.0)
    assert "that is long" not in evaluation_notice(trainer)
    trainer.close()


def test_the_evaluation_notice_names_the_cap_of_views_on_any_device(demo_scene, monkeypatch):
    """The cap (``--eval-max-images``) holds on a GPU as on a CPU, and the notice says it on both;
    a distributed run's estimate says plainly that it is not measured and what it is from."""
    import torch

    import trainer.train.eval_estimate as eval_estimate
    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.run.finish import evaluation_notice
    from trainer.train.loop import Trainer

    trainer = Trainer(tiny_config(training__eval_max_images=1), load_scene(demo_scene))
    monkeypatch.setattr(eval_estimate, "measure_eval_seconds", lambda *args: 12.0)
    try:
        on_cpu = joined(evaluation_notice(trainer).splitlines())
        assert "; at most 1 of the 4 views (--eval-max-images N, training.eval_max_images); not counted in " \
               "--time-budget" in on_cpu, on_cpu
        assert "on a CPU" not in on_cpu
        trainer.device = torch.device("cuda")  # only read for what the notice says
        on_gpu = joined(evaluation_notice(trainer).splitlines())
        assert on_gpu.endswith("estimated 12.0 s (measured on a sample of its rays); at most 1 of the 4 views "
                               "(--eval-max-images N, training.eval_max_images)"), on_gpu
        trainer.world_size = 2
        last = {"rays_per_step": 1000.0, "samples_per_step": 50_000.0, "throughput_samples_per_s": 1e6}
        lines = evaluation_notice(trainer, last).splitlines()
        assert all(len(line) <= LINE_WIDTH for line in lines), lines
        two_ranks = joined(lines)
        assert "training rate" not in two_ranks
        assert re.search(r", estimated [0-9]+\.[0-9] m?s \(not measured: from the last training interval's samples/s, "
                         r"rendering taken as 3x as fast as training\);", two_ranks), two_ranks
    finally:
        trainer.device = torch.device("cpu")
        trainer.close()


def test_the_evaluation_estimate_reads_the_same_before_and_after(demo_scene, monkeypatch):
    """The estimate before the evaluation and beside its measured time after it: one formatter,
    one decimal under a minute (it read "9 s" before and "9.1 s" after)."""
    import trainer.train.eval_estimate as eval_estimate
    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.run.finish import evaluation_notice, evaluation_result_text
    from trainer.train.loop import Trainer

    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    monkeypatch.setattr(eval_estimate, "measure_eval_seconds", lambda *args: 9.14)
    try:
        notice, estimate = evaluation_notice(trainer, with_estimate=True)
    finally:
        trainer.close()
    assert ", estimated 9.1 s (measured on a sample of its rays)" in joined(notice.splitlines()), notice
    result = {"split": "test", "mean_psnr_db": 23.0412, "mean_ssim": 0.81234}
    assert evaluation_result_text(4, result, 8.66, estimate).startswith("evaluation on 4 test images in 8.7 s "
                                                                         "(estimated 9.1 s):")
    monkeypatch.setattr(eval_estimate, "measure_eval_seconds", lambda *args: 75.4)
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    try:
        notice = evaluation_notice(trainer)
    finally:
        trainer.close()
    assert ", estimated 1 min 15 s (" in joined(notice.splitlines()), notice
    assert "(estimated 1 min 15 s)" in evaluation_result_text(4, result, 80.2, 75.4)


def test_the_eval_max_images_flag_is_said_to_cap_the_views_on_any_device(monkeypatch):
    import argparse

    from trainer.contract.commandline import add_train_arguments
    from trainer.contract.config import load_config
    from trainer.contract.usage import keep_words_whole

    monkeypatch.setenv("COLUMNS", "80")
    parser = argparse.ArgumentParser(prog="python -m trainer")
    add_train_arguments(parser)
    text = " ".join(keep_words_whole(parser).format_help().split())
    preset = load_config(REPO / "configs" / "small.json").training.eval_max_images
    assert (f"--eval-max-images N evaluate at most N views, evenly spaced, on any device (training.eval_max_images; "
            f"default: every view, the CPU preset {preset})") in text, text


def _record(step: int) -> dict:
    return {"step": step, "loss": 0.012345, "train_psnr_db": 23.456, "rays_per_s": 77_612.0,
            "throughput_samples_per_s": 6_104_850.0, "wall_time_s": 62.0}


def test_the_progress_line_fits_80_columns_keeping_step_eta_loss_and_psnr():
    from trainer.contract.textlines import fit_progress_line
    from trainer.run.progress import TrainProgress

    figures = TrainProgress.figures(_record(101))
    line = fit_progress_line(79, "train", 101 / 2000, ["step 101/2000", "eta 12:34", "0:01:02"], figures)
    assert len(line) <= 79 and "step 101/2000 eta 12:34 0:01:02" in line
    assert line.endswith(" loss 0.01235 psnr 23.46 dB") and "rays/s" not in line  # the rates drop first
    wide = fit_progress_line(200, "train", 0.5, ["step 1000/2000", "eta 1:00"], figures)
    assert wide.endswith("loss 0.01235 psnr 23.46 dB 6.10 M samples/s 77.6 k rays/s")  # value, then unit (README)
    narrow = fit_progress_line(40, "train", 0.5, ["step 1000/2000", "eta 1:00", "0:01:00"], figures)
    assert narrow.startswith("train ━") and narrow.endswith("step 1000/2000 eta 1:00 0:01:00") and len(narrow) <= 40


def test_a_record_of_start_up_steps_only_shows_no_rate():
    from trainer.run.progress import TrainProgress

    assert TrainProgress.figures({**_record(1), "timed_steps": 0})[1:] == ["psnr 23.46 dB", "start-up"]
    assert TrainProgress.figures({**_record(2), "timed_steps": 1})[2] == "6.10 M samples/s"


def _drawn(screen) -> list[str]:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()).replace("\r", "\n").splitlines()


def test_the_live_progress_on_an_80_column_terminal_shows_step_eta_loss_and_psnr():
    import io

    from rich.console import Console

    from trainer.run.progress import TrainProgress

    screen = io.StringIO()
    progress = TrainProgress(2000, quiet=False, console=Console(file=screen, width=80, force_terminal=True,
                                                              color_system=None))
    progress.log(_record(100))
    progress.step(100, 30.0)  # the first step seen: the rate counts from here
    progress.step(101, 30.3)
    progress.refresh()
    progress.start_evaluation()
    progress.evaluation_rays(12_300, 32_400)
    progress.refresh()
    progress.close()
    drawn = _drawn(screen)
    training = [line for line in drawn if line.startswith("train ")][-1]
    assert re.search(r" step 101/2000 eta 9:30 \d:\d\d loss 0.01235 psnr 23.46 dB$", training), training
    assert len(training) <= 80
    evaluating = [line for line in drawn if line.startswith("evaluate ")][-1]
    assert "12.3 k/32.4 k rays eta " in evaluating and len(evaluating) <= 80, evaluating


def test_no_eta_until_a_training_rate_is_known(capsys, monkeypatch):
    import trainer.run.progress as progress_module
    from trainer.run.progress import TrainProgress

    monkeypatch.setattr(progress_module, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a plain line at every step
    progress = TrainProgress(2000, quiet=True)
    progress.step(1, 1e-5, started=False)  # a start-up step: its seconds are not training
    progress.step(2, 2e-5, started=True)  # the start-up ended with this step: no rate yet
    progress.step(3, 0.5)
    lines = capsys.readouterr().out.splitlines()
    assert [line.rsplit("eta ", 1)[1] for line in lines] == ["-:--", "-:--", "16:38"], lines  # not 0:00 at step 1


def test_the_live_clock_counts_training_seconds_and_a_time_budget_fills_the_bar():
    """After the start-up the live line's clock is the seconds trained (the budget's clock, not
    the wall since the start-up began), and with a time budget the bar fills by whichever of
    steps and seconds ends the run first."""
    import io

    from rich.console import Console

    from trainer.run.progress import TrainProgress

    screen = io.StringIO()
    progress = TrainProgress(10_000, quiet=False, time_budget_s=60.0,
                             console=Console(file=screen, width=80, force_terminal=True, color_system=None))
    progress.startup_begins()
    progress.step(1, 0.0, started=False)  # a start-up step
    progress.refresh()
    startup = [line for line in _drawn(screen) if line.startswith("start-up ")]
    assert startup and " first steps not training time " in startup[-1], _drawn(screen)  # not "train step 1"
    progress.step(500, 45.0)  # 5 % of the steps, 75 % of the budget
    progress.refresh()
    progress.close()
    line = [line for line in _drawn(screen) if line.startswith("train ")][-1]
    assert re.search(r" step 500/10000 eta \S+ 0:45$", line), line  # 45 s trained, whatever the wall
    bar = line.split(" step ")[0].removeprefix("train ").strip()
    assert 0.7 <= bar.count("━") / len(bar) <= 0.8, line  # filled by the budget's 75 %


def test_a_plain_metrics_line_keeps_the_step_count_and_eta_of_the_live_line(capsys):
    from trainer.run.progress import TrainProgress

    progress = TrainProgress(2000, quiet=True)
    progress.log({**_record(100), "wall_time_s": 30.0})  # before a rate is known
    progress.step(100, 30.0)  # the first step seen: the rate counts from here
    progress.log({**_record(101), "wall_time_s": 30.3})
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["step 100/2000  eta -:--  t=30.0 s  loss 0.01235  psnr 23.46 dB",
                     "  6.10 M samples/s  77.6 k rays/s",
                     "step 101/2000  eta 9:30  t=30.3 s  loss 0.01235  psnr 23.46 dB",
                     "  6.10 M samples/s  77.6 k rays/s"], lines
    assert all(len(line) <= LINE_WIDTH for line in lines)


def test_a_short_run_prints_a_progress_line_at_each_tenth_of_its_steps(capsys, monkeypatch):
    """Off a TTY a run too short for the timed interval still says how far it is (the driver's
    ``profile`` and ``train-many`` follow these lines); its last step has its metrics line."""
    import trainer.run.progress as progress_module
    from trainer.contract.runstatus import read_progress_line
    from trainer.run.progress import TrainProgress

    monkeypatch.setattr(progress_module, "PLAIN_PROGRESS_EVERY_S", float("inf"))  # no line from the clock
    progress = TrainProgress(30, quiet=True)
    progress.step(1, 0.0, started=False)
    for step in range(2, 31):
        if step == 15:  # a metrics record at a tenth: its line says the step, no progress line repeats it
            progress.log({**_record(15), "wall_time_s": 1.5})
        progress.step(step, 0.1 * step)
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("  ")]
    assert [line.split(" ", 1)[0] for line in lines] == ["progress:"] * 4 + ["step"] + ["progress:"] * 4, lines
    lines.pop(4)
    assert [read_progress_line(line)[:2] for line in lines] == [(s, 30) for s in (3, 6, 9, 12, 18, 21, 24, 27)]
    assert lines[-1].endswith("eta 0:00") and "eta -:--" not in lines[1], lines


def test_each_evaluated_view_says_its_time_as_the_other_durations_do():
    from trainer.run.finish import evaluated_views_text

    image = {"name": "./test/r_0", "psnr_db": 22.4871}
    assert evaluated_views_text(1, 4, 0.35, image) == ("  evaluated 1/4 views in 350.0 ms "
                                                       "(last: ./test/r_0, PSNR 22.49 dB)")
    assert evaluated_views_text(2, 4, 13.62, image) == ("  evaluated 2/4 views in 13.6 s "
                                                        "(last: ./test/r_0, PSNR 22.49 dB)")
    long = evaluated_views_text(3, 4, 2.0, {**image, "name": "./test/" + "r" * 40})
    assert len(long.splitlines()) == 2 and all(len(line) <= LINE_WIDTH for line in long.splitlines()), long
    assert long.splitlines()[1].startswith("    ") and "PSNR 22.49 dB)" in long


def test_the_plain_evaluation_line_says_its_time_with_one_decimal(capsys, monkeypatch):
    import trainer.run.progress as progress_module
    from trainer.run.progress import TrainProgress

    now = [50.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(progress_module, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a line at every chunk
    progress = TrainProgress(100, quiet=True)
    progress.start_evaluation()
    now[0] = 50.4
    progress.evaluation_rays(1000, 4000)
    now[0] = 63.6
    progress.evaluation_rays(3000, 4000)
    assert capsys.readouterr().out.splitlines() == [
        "evaluating: 25 % of the rays (1.00 k of 4.00 k) in 400.0 ms, eta 0:01",
        "evaluating: 75 % of the rays (3.00 k of 4.00 k) in 13.6 s, eta 0:05"]


def test_the_evaluation_result_fits_80_columns():
    from trainer.run.finish import evaluation_result_text

    result = {"split": "test", "mean_psnr_db": 23.0412, "mean_ssim": 0.81234}
    text = evaluation_result_text(200, result, 1234.56, 1187.04)
    assert text.splitlines() == ["evaluation on 200 test images in 20 min 35 s (estimated 19 min 47 s):",
                                 "  PSNR 23.04 dB, SSIM 0.812"]
    assert evaluation_result_text(1, result, 3.0, None) == "evaluation on 1 test image in 3.0 s: PSNR 23.04 dB, SSIM 0.812"


def test_the_opening_line_is_printed_before_the_progress_display_starts(demo_scene, tmp_path, monkeypatch, capsys):
    import trainer.run.lifecycle as lifecycle
    from trainer.cli import build_parser, train_command
    from trainer.run.progress import TrainProgress

    printed_before = []

    class Watched(TrainProgress):
        def __init__(self, *args, **kwargs):
            printed_before.append(capsys.readouterr().out)  # what was on the screen when the display began
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "TrainProgress", Watched)
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--device", "cpu", "--n-steps", "2", "--no-eval", "--out", str(tmp_path / "r")])
    assert train_command(args) == 0
    assert len(printed_before) == 1 and _opening(printed_before[0]).startswith(f"training {demo_scene} on cpu, 1 rank, ")


def test_the_start_up_line_comes_before_the_first_progress_line(demo_scene, tmp_path, monkeypatch, capsys):
    """Off a TTY a progress line can come before the first metrics record: the start-up statement
    is said as soon as the start-up is over, before any line of the clock's steps."""
    import trainer.run.progress as progress_module
    from trainer.cli import build_parser, train_command

    monkeypatch.setattr(progress_module, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a plain line at every step
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--device", "cpu", "--n-steps", "6", "--no-eval", "--out", str(tmp_path / "r"),
                                      "--set", "training.log_every=5"])
    assert train_command(args) == 0
    lines = capsys.readouterr().out.splitlines()
    startup = [i for i, line in enumerate(lines) if line.startswith("start-up ")]
    progress = [i for i, line in enumerate(lines) if re.match(r"(train )?step \d+/6", line) or
                line.startswith("progress: step ")]
    assert len(startup) == 1, lines
    later = [i for i in progress if "step 1/" not in lines[i]]  # the start-up step's own line may come first
    assert later and startup[0] < later[0], lines


def test_the_evaluation_result_follows_the_finished_bar(demo_scene, tmp_path, monkeypatch):
    """On a terminal the live bar stays on screen when it stops: it is stopped before the result
    is printed, so the result is the last line and not above a frozen bar."""
    import trainer.run.lifecycle as lifecycle
    from trainer.cli import build_parser, train_command
    from trainer.run.progress import TrainProgress

    events = []

    class Watched(TrainProgress):
        def message(self, text):
            events.append(("message", text))
            super().message(text)

        def close(self):
            events.append(("close", self._live is not None or not self.plain))
            super().close()

    monkeypatch.setattr(lifecycle, "TrainProgress", Watched)
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--device", "cpu", "--n-steps", "2", "--eval-max-images", "1",
                                      "--out", str(tmp_path / "r")])
    assert train_command(args) == 0
    result = next(i for i, (kind, text) in enumerate(events) if kind == "message" and text.startswith("evaluation on "))
    assert any(kind == "close" for kind, _ in events[:result]), events

"""The end of training: the trained model kept before anything else runs (``--save-snapshot``, or a
snapshot in the run directory), the final evaluation announced with its estimated time, and their
fields in ``status.json``."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from trainer.contract.config import TrainConfig
from trainer.contract.errors import TrainingError
from trainer.contract.rundir import NULL_REASONS_KEY
from trainer.contract.metrics import si_number
from trainer.contract.textlines import counted, estimate_text, fit_lines, seconds_text
from trainer.run.progress import TrainProgress
from trainer.run.status import Terminated

__all__ = ["LONG_EVALUATION_S", "budget_stop_text", "evaluated_views_text", "evaluation_notice", "evaluation_result_text", "finish_status",
           "keep_final_model", "model_kept_text", "train_with_progress"]


def train_with_progress(trainer: Any, cfg: TrainConfig, progress: TrainProgress, live: Any = None,
                        stop: Any = None) -> dict[str, Any]:
    """Run ``trainer.train`` with the config's snapshot/eval cadence, reporting through
    ``progress`` (closed after the evaluation, :func:`finish_status`) and ``live`` (``--view``'s
    :class:`~trainer.viewer.live.LiveView` or None, closed when the training ends); ``stop`` (a
    :class:`~trainer.run.interrupt.StopAfterStep` or None) is asked after each step whether Ctrl-C
    came. Returns the last metrics record."""

    def on_eval(result: dict[str, Any]) -> None:
        progress.message(f"eval step {result['step']}: {result['mean_psnr_db']:.2f} dB on {result['split']}")

    said_startup = False

    def say_startup() -> None:  # once, as soon as the start-up is over: before any line of the clock's steps
        nonlocal said_startup
        if not said_startup and trainer.startup is not None:
            said_startup = True
            progress.message(trainer.startup.line())

    def log(record: dict[str, Any]) -> None:
        say_startup()
        progress.log(record)

    def stepped(step: int, train_time_s: float) -> None:
        say_startup()
        progress.step(step, train_time_s, started=trainer.startup is not None)  # no ETA from start-up time

    on_log, on_step = log, stepped
    if live is not None:
        on_log, on_step = live.hooks(on_log, on_step)
    if stop is not None:
        on_step = stop.after(on_step)
    try:
        last = trainer.train(
            on_log=on_log,
            on_eval=on_eval,
            snapshot_every=cfg.training.snapshot_every,
            eval_every=cfg.training.eval_every,
            on_step=on_step,
        )
    finally:
        if live is not None:
            live.close()
    return last


def finish_status(
    trainer: Any, args: argparse.Namespace, status: dict[str, Any], progress: TrainProgress,
    last: dict[str, Any], t0: float,
) -> None:
    """After training: the job's throughput over this process's timed steps
    (:class:`~trainer.train.records.RunThroughput`; none when no step was timed, e.g. a run of
    start-up steps only), ``--save-snapshot`` (the path the trainer wrote), the final evaluation
    unless ``--no-eval``, and wall time since ``t0``; all into ``status``."""
    mean = trainer.run_throughput.samples_per_s()
    if mean is not None:
        status["throughput_samples_per_s"] = mean
    if trainer.startup is not None:
        status.update(startup_s=trainer.startup.startup_s, kernels_compiled=trainer.startup.kernels_compiled,
                      step_kind=trainer.startup.step_kind)
    t = trainer.cfg.training
    if trainer.step < t.n_steps and t.time_budget_s is not None:
        status["stopped_by"] = "time_budget"
        progress.message(budget_stop_text(trainer.step, t.n_steps, trainer.train_time_s,
                                          trainer.projected_train_time_s(), t.time_budget_s,
                                          resumed_step=status.get("resumed_from_step")))
    keep_final_model(trainer, args, status)
    if not args.no_eval:
        notice, estimate = evaluation_notice(trainer, last, with_estimate=True)
        progress.message(notice)
        started = time.perf_counter()

        def view_done(done: int, total: int, image: dict[str, Any]) -> None:
            if total > 1:
                progress.message(evaluated_views_text(done, total, time.perf_counter() - started, image))

        trainer.eval_progress = view_done
        trainer.eval_rays_progress = progress.evaluation_rays
        progress.start_evaluation()
        try:
            result = trainer.evaluate()
        except (KeyboardInterrupt, Terminated):
            status["interrupted_during"] = "evaluation"
            progress.message("\n".join(fit_lines([f"evaluation interrupted; {model_kept_text(trainer, status)}"])))
            raise
        except Exception as exc:
            raise TrainingError(f"trained; evaluation failed: {type(exc).__name__}: {exc} "
                                f"({model_kept_text(trainer, status)})") from exc
        finally:
            trainer.eval_progress = None
            trainer.eval_rays_progress = None
        status.update({"eval_psnr_db": result["mean_psnr_db"], "eval_ssim": result["mean_ssim"], "eval_split": result["split"]})
        why = result.get(NULL_REASONS_KEY, {})  # a NaN mean is written as null with its reason
        nulls = {key: why[mean] for key, mean in (("eval_psnr_db", "mean_psnr_db"), ("eval_ssim", "mean_ssim"))
                 if mean in why}
        if nulls:
            status[NULL_REASONS_KEY] = nulls
        n_images = len(result["images"])
        status["eval_time_s"] = time.perf_counter() - started
        if estimate is not None:
            status["eval_estimate_s"] = estimate
        progress.close()  # the live line ends first: the result follows the finished bar, not the reverse
        progress.message(evaluation_result_text(n_images, result, status["eval_time_s"], estimate))
    progress.close()
    status["wall_s"] = time.perf_counter() - t0


def budget_stop_text(step: int, n_steps: int, train_time_s: float, projected_s: float, budget_s: float,
                     resumed_step: int | None = None) -> str:
    """The line of a run the time budget stopped (under 80 columns): where, after how many
    training seconds, and that the next step, expected to end at ``projected_s`` (s of training),
    would have passed ``budget_s`` (the look-ahead of :mod:`trainer.train.budget`); or, when the
    last step itself ended past ``budget_s`` (slower than the steps before it foretold), by how much;
    or, for a run resumed at ``resumed_step`` that took no step, that the budget was spent before
    the resume."""
    if resumed_step is not None and step == resumed_step:  # no step here: the seconds are the snapshot's
        return "\n".join(fit_lines([
            f"stopped at step {step} of {n_steps},", "where it resumed:",
            f"the time budget of {budget_s:g} s", "(training.time_budget_s, --time-budget)",
            f"was spent before the resume ({seconds_text(train_time_s)} of training)"]))
    if train_time_s > budget_s:  # the last step itself ran past the budget (a step slower than foreseen)
        return "\n".join(fit_lines([
            f"stopped at step {step} of {n_steps}", f"after {seconds_text(train_time_s)}:",
            f"the last step ran {seconds_text(train_time_s - budget_s)} past the time budget of {budget_s:g} s",
            "(training.time_budget_s, --time-budget), longer than the steps before it"]))
    next_s = max(projected_s - train_time_s, 0.0)
    return "\n".join(fit_lines([
        f"stopped at step {step} of {n_steps}", f"after {seconds_text(train_time_s)}:",
        f"the next step, expected to take {seconds_text(next_s)},", f"would pass the time budget of {budget_s:g} s",
        "(training.time_budget_s, --time-budget)"]))


def evaluated_views_text(done: int, total: int, seconds: float, image: dict[str, Any]) -> str:
    """The line after each view of the final evaluation (of more than one): ``  evaluated 1/4
    views in 1.3 s (last: ./test/r_0, PSNR 22.49 dB)``; ``seconds`` (s) since the evaluation
    began, as :func:`~trainer.contract.textlines.seconds_text` writes it; ``image``: the view's
    ``name`` and ``psnr_db``. Under 80 columns: a long name goes on in an indented line."""
    return "\n".join(fit_lines([f"  evaluated {done}/{total} views in {seconds_text(seconds)}",
                                 f"(last: {image['name']},", f"PSNR {image['psnr_db']:.2f} dB)"], indent="    "))


def evaluation_result_text(n_images: int, result: dict[str, Any], took_s: float, estimate_s: float | None) -> str:
    """The lines (under 80 columns, :func:`~trainer.contract.textlines.fit_lines`) after the final
    evaluation: ``evaluation on 4 test images in 13.3 s (estimated 17.0 s): PSNR 23.04 dB, SSIM
    0.812``, the scores on a line of their own when the whole is too long; the time taken and the
    estimate written alike, as the estimate before the evaluation
    (:func:`~trainer.contract.textlines.estimate_text`: ``in 20 min 35 s (estimated 19 min 47 s)``)."""
    estimated = f" (estimated {estimate_text(estimate_s)})" if estimate_s is not None else ""
    return "\n".join(fit_lines([
        f"evaluation on {n_images} {result['split']} image{'s' if n_images != 1 else ''} in {estimate_text(took_s)}{estimated}:",
        f"PSNR {result['mean_psnr_db']:.2f} dB, {ssim_text(result.get('mean_ssim'))}"]))


def ssim_text(mean_ssim: float | None) -> str:
    """``SSIM 0.812``, or why there is none (every view smaller than SSIM's window)."""
    if mean_ssim is None or not math.isfinite(mean_ssim):
        from trainer.metrics_image import SSIM_WINDOW

        return f"no SSIM (no view of at least {SSIM_WINDOW}x{SSIM_WINDOW} pixels)"
    return f"SSIM {mean_ssim:.3f}"


def keep_final_model(trainer: Any, args: argparse.Namespace, status: dict[str, Any]) -> None:
    """Write the trained model before anything else runs after training (evaluation may fail or
    be interrupted): ``--save-snapshot``'s file, else, for a single-process run, a snapshot of the
    last step in the run directory (distributed runs already hold their final checkpoint);
    ``status["snapshot"]`` says where."""
    if args.save_snapshot:
        status["snapshot"] = str(trainer.save(args.save_snapshot))
        return
    run_dir = getattr(trainer, "run_dir", None)
    if status.get("checkpoint") or run_dir is None:
        return
    path = run_dir.snapshot_path(trainer.step)
    if not path.exists():
        trainer.save(path)
    status["snapshot"] = str(path)


def model_kept_text(trainer: Any, status: dict[str, Any]) -> str:
    """Where the trained model is, for the line that reports a failed or interrupted evaluation."""
    where = status.get("snapshot") or status.get("checkpoint")
    return (f"the trained model (step {trainer.step}) is in {where}; --resume it with --n-steps "
            f"{trainer.step} to evaluate later")


LONG_EVALUATION_S = 600.0
"""An estimated final evaluation longer than this (s) gets a hint on how to shorten it."""


def evaluation_notice(trainer: Any, last: dict[str, Any] | None = None, with_estimate: bool = False) -> Any:
    """The lines (under 80 columns) printed before the final evaluation: which views, how many
    pixels (``32.4 k pixels``), an estimated time
    (:func:`~trainer.contract.textlines.estimate_text`, as the line after the evaluation writes it; single process: measured by rendering a sample of their rays with the trained field and
    occupancy grid, :func:`~trainer.train.eval_estimate.measure_eval_seconds`; distributed: from
    the samples/s of the last training interval, :func:`~trainer.train.eval_estimate.eval_seconds_estimate`),
    the cap of views in effect and how to change it (``training.eval_max_images``, on any device),
    and on a CPU that it is not in the time budget. With ``with_estimate``:
    ``(line, estimated seconds or None)``."""
    from trainer.train.eval_estimate import EVAL_SPEEDUP_OVER_TRAINING, eval_seconds_estimate, measure_eval_seconds
    from trainer.train.evaluate import eval_split_name, evaluation_frames

    split = eval_split_name(trainer)
    views = trainer.scene.frames(split)
    cap = trainer.cfg.training.eval_max_images
    chosen = evaluation_frames(views, cap)
    pixels = sum(f.intrinsics.width * f.intrinsics.height for _, f in chosen)
    spp = trainer.cfg.training.eval_spp
    parts = [f"evaluating {counted(len(chosen), split + ' view')}", f"({si_number(pixels)} pixels,",
             f"{counted(spp, 'render')} each)"]
    if getattr(trainer, "world_size", 1) == 1:
        estimate, how = measure_eval_seconds(trainer, [f for _, f in chosen], spp), ["measured on a sample of its rays"]
    else:
        estimate = eval_seconds_estimate(pixels, spp, last)
        how = ["not measured: from the last", "training interval's samples/s,",
               f"rendering taken as {EVAL_SPEEDUP_OVER_TRAINING:g}x as fast", "as training"]
    if estimate is not None:
        parts[-1] += ","
        parts += [f"estimated {estimate_text(estimate)}", f"({how[0]}", *how[1:]]
        parts[-1] += ")"
    if cap is not None and cap < len(views):
        parts[-1] += ";"
        parts += [f"at most {cap} of the {len(views)} views", "(--eval-max-images N,", "training.eval_max_images)"]
    if trainer.device.type == "cpu":
        parts[-1] += ";"
        parts += ["not counted in --time-budget,", "--no-eval skips it"]
    if estimate is not None and estimate > LONG_EVALUATION_S:
        parts[-1] += ";"
        parts += ["that is long:", "Ctrl-C keeps the trained model,", "and fewer views (--eval-max-images 1)",
                  "or smaller images (--downscale N)", "shorten it"]
    line = "\n".join(fit_lines(parts))
    return (line, estimate) if with_estimate else line

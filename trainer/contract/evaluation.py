"""The evaluation of a run (``eval.json``) and the rule that judges it: collapse to the background.

``eval.json`` (:attr:`trainer.contract.rundir.RunDir.eval_path`) is one JSON object, written by the
final evaluation (and by periodic ones) of rank 0::

    split, split_origin      the views scored (the scene's own split, or frames held out)
    step                     the step of the evaluated model
    background               "white" | "black": the background composited behind the renders
    mean_psnr_db, mean_ssim  means over the views (dB, each view capped at psnr_cap_db; SSIM over
                             the ssim_views large enough for its window); psnr_of_mean_mse_db;
                             metrics_note says which is which
    background_psnr_db       the mean PSNR of painting every pixel the background colour
    mean_psnr_affine_db      the mean PSNR after each view's least-squares affine colour map (the
                             held-out score of a model with training.appearance)
    occupancy_warmup_steps   training.occupancy_warmup_steps of the run
    background_collapse      the warning of :func:`collapse_message`, or null
    collapse_cures           the cures that apply to this capture and run (:func:`collapse_cures`)
    null_reasons             why a value is null (a NaN or infinite mean), by its key
    images                   per view: index, name, mse, psnr_db, psnr_affine_db, ssim, background_psnr_db

:func:`read_evaluation` reads it back (the driver's diagnoses and the reports).

Collapse to the background: a model whose test renders score no better than painting every
pixel the background colour. A NeRF whose density died early (a learned background colour explains the images, a step size
that drove the densities negative) renders the background everywhere; its PSNR is then that of
the constant background prediction against the same ground truth, whatever else went right.
:func:`collapse_message` judges a scored evaluation by that rule; evaluation warns with it and
``ngptune profile`` and the sweep's trials report it as the ``background_collapse`` diagnosis.

Stdlib only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainer.contract.errors import TrainerError
from trainer.contract.rundir import RunDir

__all__ = [
    "COLLAPSE_CURES",
    "COLLAPSE_MARGIN_DB",
    "EVALUATION_KEYS",
    "LEARNING_RATE_CURE",
    "EvaluationError",
    "collapse_cures",
    "collapse_gap_db",
    "collapse_message",
    "past_occupancy_warmup",
    "read_evaluation",
]

EVALUATION_KEYS: tuple[str, ...] = (
    "split", "split_origin", "step", "background", "mean_psnr_db", "psnr_cap_db", "psnr_of_mean_mse_db",
    "mean_ssim", "ssim_views", "background_psnr_db", "mean_psnr_affine_db", "metrics_note", "occupancy_warmup_steps",
    "background_collapse", "collapse_cures", "images",
)
"""The keys of ``eval.json`` (module docstring)."""


class EvaluationError(TrainerError):
    """A run's ``eval.json`` is unreadable or not a JSON object (names the file)."""


def read_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's ``eval.json`` as a dict, or None when the run was not evaluated.

    Raises:
        EvaluationError: the file is not a JSON object (naming it).
    """
    path = RunDir(run_dir).eval_path
    if not path.is_file():
        return None
    try:
        evaluation = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvaluationError(f"{path}: not readable as JSON ({exc})") from exc
    if not isinstance(evaluation, dict):
        raise EvaluationError(f"{path}: expected a JSON object, got {type(evaluation).__name__}")
    return evaluation

#: the mean test PSNR lies within this many dB of the background-only prediction's: collapsed.
COLLAPSE_MARGIN_DB = 0.1

LEARNING_RATE_CURE = ("a different optimizer.learning_rate (too large drives the densities below the occupancy "
                      "threshold early, too small never grows them)")

COLLAPSE_CURES = (
    "with an alpha channel: a random background (training.background=random), so a constant colour cannot "
    "explain the images; without one: the backdrop's colour as the background (training.background=white or "
    f"black); {LEARNING_RATE_CURE}"
)
"""The cures whatever the capture (the profile's knob when its evaluation does not name them)."""


def collapse_cures(*, has_alpha: bool, background: str, backdrop: str | None) -> str:
    """The cures of a collapse that apply to this capture and run.

    Args:
        has_alpha: whether the training images have an alpha channel.
        background: ``training.background`` of the run (``random``, ``white``, ``black``).
        backdrop: the colour of the images' borders when it is uniform, ``"white"`` or
            ``"black"`` (a studio backdrop), else None.

    Returns:
        One phrase listing them: a random background only for images with alpha (without alpha,
        every pixel's colour is its target whatever the background, so it changes nothing); for
        images without alpha on a uniform backdrop, that colour as the background (an empty ray
        then explains the backdrop, and density is needed only where the object is) and a matte;
        always the learning rate.
    """
    cures = []
    if has_alpha and background != "random":
        cures.append("train with a random background (training.background=random) so a constant colour cannot "
                     "explain the images")
    elif not has_alpha:
        if backdrop is not None and background != backdrop:
            cures.append(f"train against the images' {backdrop} backdrop (training.background={backdrop}): they have "
                         f"no alpha channel, so with a {background} background every backdrop pixel must be painted "
                         "by density, and an empty ray explains it with this one")
        cures.append("give the images an alpha channel (a matte of the object), which makes the backdrop known "
                     "to be empty")
    cures.append(LEARNING_RATE_CURE)
    return "; ".join(cures)


def past_occupancy_warmup(step: int, occupancy_warmup_steps: int) -> bool:
    """True once ``step`` is beyond the occupancy grid's warm-up (before it a blank render is
    expected: the grid has not carved anything yet)."""
    return step > occupancy_warmup_steps


def collapse_gap_db(mean_psnr_db: float, background_psnr_db: float) -> float:
    """Mean test PSNR minus the background-only prediction's PSNR, dB (NaN when either is not finite)."""
    if not (math.isfinite(mean_psnr_db) and math.isfinite(background_psnr_db)):
        return math.nan
    return mean_psnr_db - background_psnr_db


def collapse_message(mean_psnr_db: float, background_psnr_db: float, step: int,
                     occupancy_warmup_steps: int, cures: str = COLLAPSE_CURES) -> str | None:
    """The warning for a collapsed model, or None.

    Args:
        mean_psnr_db: mean test PSNR of the renders (``eval.json``'s ``mean_psnr_db``).
        background_psnr_db: the same mean for a prediction of the background colour at every
            pixel (``eval.json``'s ``background_psnr_db``).
        step: the step the model was evaluated at.
        occupancy_warmup_steps: ``training.occupancy_warmup_steps``.
        cures: what to try (:func:`collapse_cures` of the capture and run).

    Returns:
        One line naming the cause and the cures when, past the occupancy warm-up, the two PSNRs
        differ by less than :data:`COLLAPSE_MARGIN_DB`; None otherwise (also when either is NaN).
    """
    gap = collapse_gap_db(mean_psnr_db, background_psnr_db)
    if not past_occupancy_warmup(step, occupancy_warmup_steps) or not abs(gap) < COLLAPSE_MARGIN_DB:
        return None
    return (f"the model renders only the background: test PSNR {mean_psnr_db:.2f} dB at step {step} is within "
            f"{COLLAPSE_MARGIN_DB:g} dB of painting every pixel the background colour ({background_psnr_db:.2f} dB); "
            f"the density collapsed after the occupancy warm-up ({occupancy_warmup_steps} steps). Cures: {cures}")

"""Collapse to the background: a model whose test renders score no better than painting every
pixel the background colour.

A NeRF whose density died early (a learned background colour explains the images, a step size
that drove the densities negative) renders the background everywhere; its PSNR is then that of
the constant background prediction against the same ground truth, whatever else went right.
:func:`collapse_message` judges a scored evaluation by that rule; evaluation warns with it and
``ngptune profile`` and the sweep's trials report it as the ``background_collapse`` diagnosis.

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

import math

#: the mean test PSNR lies within this many dB of the background-only prediction's: collapsed.
COLLAPSE_MARGIN_DB = 0.1

COLLAPSE_CURES = (
    "train with a random background (training.background=random) so a constant colour cannot "
    "explain the images; a centre-crop warm-up (the first steps' rays drawn from the middle of "
    "the images, where the object is); a different optimizer.learning_rate (too large drives the "
    "densities below the occupancy threshold early, too small never grows them)"
)


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
                     occupancy_warmup_steps: int) -> str | None:
    """The warning for a collapsed model, or None.

    Args:
        mean_psnr_db: mean test PSNR of the renders (``eval.json``'s ``mean_psnr_db``).
        background_psnr_db: the same mean for a prediction of the background colour at every
            pixel (``eval.json``'s ``background_psnr_db``).
        step: the step the model was evaluated at.
        occupancy_warmup_steps: ``training.occupancy_warmup_steps``.

    Returns:
        One line naming the cause and the cures when, past the occupancy warm-up, the two PSNRs
        differ by less than :data:`COLLAPSE_MARGIN_DB`; None otherwise (also when either is NaN).
    """
    gap = collapse_gap_db(mean_psnr_db, background_psnr_db)
    if not past_occupancy_warmup(step, occupancy_warmup_steps) or not abs(gap) < COLLAPSE_MARGIN_DB:
        return None
    return (f"the model renders only the background: test PSNR {mean_psnr_db:.2f} dB at step {step} is within "
            f"{COLLAPSE_MARGIN_DB:g} dB of painting every pixel the background colour ({background_psnr_db:.2f} dB); "
            f"the density collapsed after the occupancy warm-up ({occupancy_warmup_steps} steps). Cures: {COLLAPSE_CURES}")

"""background_collapse: the test PSNR within a margin of painting every pixel the background colour (``eval.json``)."""

from __future__ import annotations

import math

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Diagnosis, Suggestion, knob_text, not_evaluated
from ngptune.profiling.diagnoses.inputs import EVALUATION_REQUIRED, ProfileInputs
from trainer.contract import COLLAPSE_CURES, COLLAPSE_MARGIN_DB, collapse_gap_db, past_occupancy_warmup

NAME = "background_collapse"
THRESHOLD = COLLAPSE_MARGIN_DB
UNIT = "dB"  # of the value and the threshold (checks.UNITS)
"""|test PSNR − background PSNR| below this many dB past the occupancy warm-up (the trainer's own rule)."""
KNOB: tuple[Suggestion | str, ...] = (COLLAPSE_CURES,)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    """Fires (severity high: the run trained nothing) when the test PSNR lies within
    :data:`trainer.contract.evaluation.COLLAPSE_MARGIN_DB` of the background-only prediction's, past the
    occupancy warm-up (:func:`trainer.contract.evaluation.collapse_message` is the trainer's warning)."""
    name, threshold, evaluation = NAME, THRESHOLD, inputs.evaluation
    if evaluation is None:
        return not_evaluated(name, threshold, "needs the run's eval.json (the run was not evaluated)")
    missing = [k for k in EVALUATION_REQUIRED if evaluation.get(k) is None]
    if missing:
        return not_evaluated(name, threshold, f"eval.json lacks {', '.join(missing)}")
    step, warmup = int(evaluation["step"]), int(evaluation["occupancy_warmup_steps"])
    mean_db, background_db = float(evaluation["mean_psnr_db"]), float(evaluation["background_psnr_db"])
    if not past_occupancy_warmup(step, warmup):
        return not_evaluated(name, threshold, f"the evaluation at step {step} lies within the occupancy "
                                               f"warm-up ({warmup} steps), where a blank render is expected")
    value = collapse_gap_db(mean_db, background_db)
    if math.isnan(value):
        return not_evaluated(name, threshold, f"eval.json's PSNRs are not finite ({mean_db}, {background_db} dB)")
    evidence = (f"test PSNR {mean_db:.2f} dB at step {step} vs {background_db:.2f} dB for painting every pixel "
                f"the background colour ({value:+.2f} dB); threshold ±{threshold:g} dB")
    if abs(value) >= threshold:
        return Check(name, "clear", value, threshold, evidence)
    evidence += (f": the model renders only the background (its density collapsed after the occupancy "
                 f"warm-up of {warmup} steps)")
    return Check(name, "fired", value, threshold, evidence,  # the knob: the cures the evaluation found for its capture
                 Diagnosis(name, "high", value, threshold, evidence,
                           evaluation.get("collapse_cures") or knob_text(KNOB, None)))

"""data_loading: the share of the step spent drawing the next batch (worst rank)."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Suggestion
from ngptune.profiling.diagnoses.inputs import ProfileInputs, phase_share_check

NAME = "data_loading"
#: data_loading: share of the step spent drawing the next batch. With the pixel table on the GPU the
#: draw is a gather kernel well under 1 % of the step; above 10 % the input pipeline (host decode,
#: host→device copies) holds the step back, and removing it gains more than the other knobs' noise.
THRESHOLD = 0.10
UNIT = "share"  # of the value and the threshold (checks.UNITS)
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("data.placement", "device", "pixel table on the GPU"),
    Suggestion("data.decode_threads", how="more"),
)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    return phase_share_check(means, NAME, THRESHOLD, "data", "drawing the next batch (data phase)", KNOB, inputs.config)

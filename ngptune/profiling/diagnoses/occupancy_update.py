"""occupancy_update: the share of the step spent updating the occupancy grid after its warm-up (worst rank)."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Suggestion, not_evaluated
from ngptune.profiling.diagnoses.inputs import ProfileInputs, past_warmup_phases, phase_share_check, phases_timed, rank_phase_means, warmup_sentence

NAME = "occupancy_update"
#: occupancy_update: share of the step spent updating the occupancy grid (worst rank). The
#: update evaluates the density of grid cells every ``training.occupancy_update_every`` steps;
#: above a quarter of the step it costs more than it saves in marching.
THRESHOLD = 0.25
UNIT = "share"  # of the value and the threshold (checks.UNITS)
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("training.occupancy_update_every", how="higher: rarer updates"),
    Suggestion("training.occupancy_resolution", how="smaller"),
)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    """The share of the step in the occupancy update, on the intervals after the occupancy warm-up
    (:func:`past_warmup_phases`; all steady intervals when the config is unknown)."""
    name, threshold, doing = NAME, THRESHOLD, "updating the occupancy grid"
    phases, config = inputs.phases, inputs.config
    if config is None or not phases_timed(means):
        return phase_share_check(means, name, threshold, "occupancy_update", doing, KNOB, config)
    past = past_warmup_phases(phases, config)
    if past.empty:
        last = int(phases["step"].max())
        return not_evaluated(name, threshold, warmup_sentence(config, last))
    doing += f" after the occupancy warm-up ({config.training.occupancy_warmup_steps} steps)"
    return phase_share_check(rank_phase_means(past), name, threshold, "occupancy_update", doing, KNOB, config)

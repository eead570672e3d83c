"""wasted_samples: the occupied fraction of the occupancy grid after its warm-up (samples marched in empty space)."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Suggestion, not_evaluated, verdict
from ngptune.profiling.diagnoses.inputs import ProfileInputs, warmup_sentence
from trainer.contract import past_occupancy_warmup

NAME = "wasted_samples"
#: wasted_samples: occupied fraction of the occupancy grid at the end of the run. The marcher
#: takes samples only in occupied cells, so samples per ray scale with this fraction. A trained
#: grid of an object scene keeps a small part of its cells (the demo scene ~0.1–0.2 after a few
#: seconds, NeRF-synthetic scenes below 0.1); a grid still above 0.3 has not carved out empty
#: space (updates too rare, decay too slow, threshold too low), and the samples it marches there
#: buy throughput but no quality.
THRESHOLD = 0.30
#: ...unless its rays take few samples all the same: a capture whose scene fills its box (fox:
#: 57 % occupied at 11 samples per ray) marches little in empty space however much is occupied.
MIN_SAMPLES_PER_RAY = 32.0
UNIT = "share"  # of the value and the threshold (checks.UNITS)
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("training.occupancy_update_every", how="lower, so the grid tracks the density"),
    Suggestion("training.occupancy_decay", how="lower"),
    Suggestion("training.occupancy_threshold", how="higher"),
)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    name, threshold, occupancy, config = NAME, THRESHOLD, inputs.occupancy, inputs.config
    if occupancy is None:
        return not_evaluated(name, threshold, "needs the occupancy fraction of rank 0's metrics records, "
                                               "which were not read for this check")
    if occupancy.empty:
        return not_evaluated(name, threshold, "needs the occupancy fraction of rank 0's metrics records; "
                                               "there are none")
    rows = occupancy.dropna(subset=["occupancy_fraction"])
    if rows.empty:
        return not_evaluated(name, threshold, "rank 0's metrics records carry no occupancy_fraction (the "
                                               "occupancy grid is off, or the trainer did not log it)")
    if config is not None:
        warmup = config.training.occupancy_warmup_steps
        past = rows[[past_occupancy_warmup(int(s), warmup) for s in rows["step"]]]
        if past.empty:
            return not_evaluated(name, threshold, "the occupancy fraction is judged after the warm-up, and "
                                  + warmup_sentence(config, int(rows["step"].iloc[-1])))
        rows = past
    first, last = rows.iloc[0], rows.iloc[-1]
    value = float(last["occupancy_fraction"])
    rays, samples = float(last["rays_per_step"]), float(last["samples_per_step"])
    samples_per_ray = samples / rays if rays > 0 else 0.0
    per_ray = f"{samples_per_ray:.0f} samples per ray" if rays > 0 else "no rays"
    evidence = (
        f"the occupancy grid is {value:.1%} occupied at step {int(last['step'])} "
        f"({float(first['occupancy_fraction']):.1%} at step {int(first['step'])}); {per_ray} in the last "
        f"interval; threshold {threshold:.0%} with {MIN_SAMPLES_PER_RAY:.0f} samples per ray or more"
    )
    fires = value > threshold and samples_per_ray >= MIN_SAMPLES_PER_RAY
    if fires:
        evidence += ": samples marched in empty space raise samples/s, not quality"
    elif value > threshold:
        evidence += ": the rays take few samples all the same (a scene that fills its box)"
    return verdict(name, value, threshold, 0.0, evidence, KNOB, config, fires=fires)

"""load_imbalance: the slowest rank's compute time over the mean rank's."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import (
    NO_PHASES, SINGLE_RANK, Check, Suggestion, ms_text, not_evaluated, verdict,
)
from ngptune.profiling.diagnoses.inputs import ProfileInputs, phases_timed, summary_column
from ngptune.profiling.tables import COMPUTE_PHASES, WAIT_PHASES

NAME = "load_imbalance"
#: load_imbalance: max / mean per-rank compute time. Ranks meet in every collective, so the step
#: takes the slowest rank's time; at 1.15 the average rank idles 13 % of it ((max − mean) / max).
#: Below that, per-step noise (ranks draw equal rays but different sample counts) dominates.
THRESHOLD = 1.15
UNIT = "ratio"  # of the value and the threshold (checks.UNITS)
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("parallel.balance_every", how="e.g. 10: move ray shares toward equal finish times"),
    Suggestion("distributed.gpu_capabilities[].compute_power", how="static shares"),
)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    name, threshold, summary, world_size = NAME, THRESHOLD, inputs.summary, inputs.world_size
    if world_size < 2:
        return not_evaluated(name, threshold, SINGLE_RANK if world_size == 1 else NO_PHASES)
    waits = ""
    if phases_timed(means):
        compute = means[list(COMPUTE_PHASES)].sum(axis=1)
        wait = means[list(WAIT_PHASES)].sum(axis=1)
        waits = (
            f"; ranks wait {ms_text(wait.min())}–{ms_text(wait.max())} ms per step in collectives "
            f"(rank {int(wait.idxmax())} longest, waiting for the slowest)"
        )
        source = "phase timers"
    else:
        compute = summary_column(summary, "compute_ms")
        if compute is None or len(compute) < 2:
            return not_evaluated(name, threshold, "needs per-rank compute times (phase timers or summary compute_ms)")
        source = "summary"
    mean = float(compute.mean())
    if not mean > 0:
        return not_evaluated(name, threshold, "the per-rank compute times are all zero")
    value = float(compute.max()) / mean
    per_rank = ", ".join(f"rank {int(r)} {ms_text(t)}" for r, t in compute.items())
    evidence = (
        f"compute ms per step ({source}): {per_rank}; max/mean = {value:.3g} (rank {int(compute.idxmax())} "
        f"slowest), threshold {threshold:.3g}{waits}"
    )
    return verdict(name, value, threshold, 1.0, evidence, KNOB, inputs.config, fires=value > threshold)

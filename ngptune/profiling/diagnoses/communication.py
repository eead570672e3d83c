"""communication: exposed gradient communication as a share of the step, on the rank that waits least."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ngptune.profiling.diagnoses.checks import (
    NO_PHASES, SINGLE_RANK, Check, Suggestion, ms_text, not_evaluated, verdict,
)
from ngptune.profiling.diagnoses.inputs import ProfileInputs, phases_timed, rank_share, summary_column

NAME = "communication"
#: communication: exposed (not overlapped) gradient communication as a share of the step, on the rank
#: that waits least (the slowest rank, whose wait is the transfer itself, not other ranks). Above
#: 15 % the step is visibly communication bound: more than compression or bucketing overheads cost.
THRESHOLD = 0.15
UNIT = "share"  # of the value and the threshold (checks.UNITS)
#: communication knob choice: achieved busbw below this fraction of the link's means the link is not
#: the limit (algorithm, channels, bucket sizes are); above it, fewer bytes must travel.
LINK_UNDERUSED_FRACTION = 0.5

#: the link is not the limit (achieved busbw below LINK_UNDERUSED_FRACTION of it)
KNOB_LINK_UNDERUSED: tuple[Suggestion | str, ...] = (
    Suggestion("NCCL_ALGO", how="Tree or Ring; the link is not the limit"),
    Suggestion("parallel.bucket_mib", how="larger"),
    Suggestion("parallel.overlap_comm", True),
)
#: the link is busy: fewer bytes must travel
KNOB_LINK_BUSY: tuple[Suggestion | str, ...] = (
    Suggestion("parallel.compression", "bf16", "half the bytes"),
    Suggestion("parallel.overlap_comm", True),
    Suggestion("parallel.mode", "subgrid", "exchanges per-ray colours instead of gradients"),
)
#: the link's bandwidth is unknown
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("parallel.overlap_comm", True),
    Suggestion("parallel.bucket_mib"),
    Suggestion("parallel.compression", "bf16"),
    Suggestion("NCCL_ALGO"),
    Suggestion("parallel.mode", "subgrid"),
)


def on_gloo(config: Any) -> bool:
    """Whether the run's ranks talked through gloo (``distributed.backend`` gloo, or auto on a CPU
    device), where no NCCL variable acts; False when the config is unknown."""
    if config is None:
        return False
    backend = config.distributed.backend
    return backend == "gloo" or (backend == "auto" and str(config.training.device).startswith("cpu"))


def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    name, threshold, summary, world_size = NAME, THRESHOLD, inputs.summary, inputs.world_size
    link_busbw_gb_per_s = inputs.link_busbw_gb_per_s
    if world_size < 2:
        return not_evaluated(name, threshold, SINGLE_RANK if world_size == 1 else NO_PHASES)
    if not phases_timed(means):
        return not_evaluated(name, threshold, NO_PHASES)
    rank, value = rank_share(means, "comm", largest=False)
    evidence = (
        f"exposed gradient communication takes at least {value:.1%} of the step on every rank "
        f"(rank {rank}: {ms_text(means.at[rank, 'comm'])} of {ms_text(means.at[rank, 'step_time_ms'])} ms), "
        f"threshold {threshold:.0%}"
    )
    busbw = summary_column(summary, "comm_busbw_gb_per_s")
    knob = KNOB
    if busbw is not None:
        achieved = float(busbw.max())
        evidence += f"; achieved bus bandwidth {achieved:.3g} GB/s"
        if link_busbw_gb_per_s is not None:
            fraction = achieved / link_busbw_gb_per_s
            evidence += f" of the link's {link_busbw_gb_per_s:.3g} GB/s ({fraction:.0%})"
            knob = KNOB_LINK_UNDERUSED if fraction < LINK_UNDERUSED_FRACTION else KNOB_LINK_BUSY
        else:
            evidence += " (link bandwidth unknown)"
    if on_gloo(inputs.config):  # NCCL variables do nothing there
        knob = tuple(s for s in knob if not (isinstance(s, Suggestion) and s.key.startswith("NCCL_")))
    return verdict(name, value, threshold, 0.0, evidence, knob, inputs.config, fires=value > threshold)

"""data_loading: the share of the step spent drawing the next batch (worst rank).

A dynamic or fixed-capacity step is judged on its ``data`` phase (the phase timers time every
step). A captured step's replays run the draw as kernels inside the CUDA graph, which the phase
timers never see: they time only each interval's sampled eager step, a different measurement. So
a captured run is judged on what its replays spend: the ray-drawing kernels' share of the traced
window (``kernels.csv``, category ``data``; ``overlap.csv``'s window when known, else the kernels'
own time), and is not evaluated, with the reason, when the trace is missing or names no such kernel
(:func:`batch_share`).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from ngptune.profiling.diagnoses.checks import NO_PHASES, Check, Suggestion, not_evaluated, verdict
from ngptune.profiling.diagnoses.inputs import ProfileInputs, captured_step, phases_timed, rank_share

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
CAPTURED_NOT_TIMED = ("the step is a captured CUDA graph: its replays draw the batch with kernels inside the graph, "
                      "which the phase timers do not see (they time only each interval's sampled eager step)")


@dataclasses.dataclass(frozen=True)
class BatchShare:
    """The worst rank's share of its step spent drawing the next batch.

    Attributes:
        rank: that rank (-1 when not measured).
        value: the share (0..1), or None when it cannot be told from the inputs.
        evidence: the sentence with the numbers and what they were measured on, or why there are none.
    """

    rank: int
    value: float | None
    evidence: str


def batch_share(inputs: ProfileInputs, means: pd.DataFrame | None) -> BatchShare:
    """The share of the step spent drawing the next batch (module docstring): from the ``data``
    phase, or for a captured step from the ray-drawing kernels of the traced replays."""
    if not captured_step(inputs):
        if not phases_timed(means):
            return BatchShare(-1, None, NO_PHASES)
        rank, value = rank_share(means, "data", largest=True)
        return BatchShare(rank, value, f"rank {rank} spends {means.at[rank, 'data']:.3g} ms of its "
                                       f"{means.at[rank, 'step_time_ms']:.3g} ms step ({value:.1%}) drawing the "
                                       f"next batch (data phase)")
    kernels = inputs.kernels
    if kernels is None or not len(kernels):
        return BatchShare(-1, None, f"{CAPTURED_NOT_TIMED}; judging the replays needs the torch.profiler trace's "
                                    "kernel table (kernels.csv), which was not collected")
    drawing = kernels[kernels["category"] == "data"]
    if drawing.empty:
        return BatchShare(-1, None, f"{CAPTURED_NOT_TIMED}; the traced replays' kernel table (kernels.csv) names no "
                                    "ray-drawing kernel (category data: training.rays_backend torch draws with "
                                    "generic kernels)")
    ranks = sorted(int(r) for r in kernels["rank"].unique())
    drawn_ms = drawing.groupby("rank")["total_ms"].sum().reindex(ranks, fill_value=0.0)
    window_ms, over = kernels.groupby("rank")["total_ms"].sum().reindex(ranks), "busy kernel time"
    overlap = inputs.overlap
    if overlap is not None and "window_ms" in overlap.columns and set(ranks) <= set(overlap["rank"].astype(int)):
        window_ms, over = overlap.set_index(overlap["rank"].astype(int))["window_ms"].reindex(ranks), "window"
    share = drawn_ms / window_ms
    rank = int(share.idxmax())
    names = ", ".join(sorted(drawing.loc[drawing["rank"] == rank, "name"].unique())[:3]) or "none on this rank"
    evidence = (f"captured CUDA graph, judged on its replays in the torch.profiler window: on rank {rank} the "
                f"ray-drawing kernels ({names}) take {drawn_ms[rank]:.3g} ms of the {window_ms[rank]:.3g} ms traced "
                f"{over} ({share[rank]:.1%}); the data phase of the sampled eager step is not the replays' time")
    return BatchShare(rank, float(share[rank]), evidence)


def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    share = batch_share(inputs, means)
    if share.value is None:
        return not_evaluated(NAME, THRESHOLD, share.evidence)
    evidence = f"{share.evidence}; threshold {THRESHOLD:.0%}"
    return verdict(NAME, share.value, THRESHOLD, 0.0, evidence, KNOB, inputs.config, fires=share.value > THRESHOLD)

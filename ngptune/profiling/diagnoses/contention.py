"""hash_grid_contention: backward over forward time of the hash-grid kernels in the trace window."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Suggestion, ms_text, not_evaluated, verdict
from ngptune.profiling.diagnoses.inputs import ProfileInputs

NAME = "hash_grid_contention"
#: hash_grid_contention: backward / forward time of the hash-grid kernels. The backward does the
#: forward's gathers plus one scatter-add of 8 corner gradients per sample and level, about 1–2×
#: the forward without contention; above 3× the atomic adds collide (many samples hitting the same
#: table entries of the coarse levels) or run in emulated half precision.
THRESHOLD = 3.0
UNIT = "ratio"  # of the value and the threshold (checks.UNITS)
#: kernels.csv ``category`` values of the hash-grid encoding's forward and backward kernels.
HASH_GRID_FWD_CATEGORY = "hash_grid_fwd"
HASH_GRID_BWD_CATEGORY = "hash_grid_bwd"
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("encoding.backend", "triton", "fused kernels"),
    Suggestion("encoding.log2_hashmap_size", how="smaller"),
    Suggestion("training.precision", "fp32", "instead of fp16 gradients"),
    Suggestion("training.precision", "bf16", "instead of fp16 gradients"),
)

def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    name, threshold, kernels = NAME, THRESHOLD, inputs.kernels
    if kernels is None or len(kernels) == 0:
        return not_evaluated(name, threshold, "needs the kernel table of a trace window (torch.profiler); none was collected")
    by_category = pd.to_numeric(kernels["total_ms"], errors="coerce").groupby(kernels["category"]).sum()
    fwd = float(by_category.get(HASH_GRID_FWD_CATEGORY, 0.0))
    bwd = float(by_category.get(HASH_GRID_BWD_CATEGORY, 0.0))
    if not (fwd > 0 and bwd > 0):
        return not_evaluated(
            name,
            threshold,
            f"the kernel table lacks {HASH_GRID_FWD_CATEGORY} or {HASH_GRID_BWD_CATEGORY} time "
            f"(forward {ms_text(fwd)} ms, backward {ms_text(bwd)} ms)",
        )
    value = bwd / fwd
    evidence = (
        f"hash-grid backward kernels take {ms_text(bwd)} ms vs forward {ms_text(fwd)} ms in the trace window "
        f"({value:.3g}x), threshold {threshold:.3g}x"
    )
    return verdict(name, value, threshold, 1.0, evidence, KNOB, inputs.config, fires=value > threshold)

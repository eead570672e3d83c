"""compute_underused: mean GPU utilisation (NVML) below what a kernel-bound step keeps, when data and communication do not explain it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ngptune.profiling.diagnoses import communication, data
from ngptune.profiling.diagnoses.checks import NO_PHASES, Check, Suggestion, not_evaluated, verdict
from ngptune.profiling.diagnoses.inputs import ProfileInputs, phases_timed, rank_share

NAME = "compute_underused"
#: compute_underused: mean GPU utilisation (% of time a kernel runs, NVML) below which the GPU is
#: under-used. An instant-NGP step at a proper batch size keeps kernels queued back to back (> 95 %);
#: below 80 % more than a fifth of the time no kernel runs — launch gaps or host work between
#: kernels, which a larger batch (more work per launch) hides.
THRESHOLD = 80.0
UNIT = "%"  # of the value and the threshold (checks.UNITS)
KNOB: tuple[Suggestion | str, ...] = (
    Suggestion("training.target_samples_per_step", how="raise it, e.g. 2x, so each kernel launch does more work"),
)

def in_windows(t_s: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Which times ``t_s`` [N] (s) lie inside one of each rank's windows (``rank``, ``from_s``,
    ``to_s``; a rank's windows do not overlap); bool [N]. A window holds ``from_s < t <= to_s``: an
    NVML sample reports the period before it."""
    inside = np.ones(len(t_s), dtype=bool)
    for _, rank in windows.groupby("rank", sort=True):
        rank = rank.sort_values("from_s")
        starts, ends = rank["from_s"].to_numpy(float), rank["to_s"].to_numpy(float)
        index = np.searchsorted(ends, t_s, side="left")  # the first window ending at or after t
        found = index < len(ends)
        found[found] = starts[index[found]] < t_s[found]
        inside &= found
    return inside


def steady_util(gpu_timeline: pd.DataFrame, windows: pd.DataFrame) -> tuple[pd.Series, int]:
    """Mean ``util_pct`` per GPU over the samples inside the steady training windows of every rank
    (:attr:`ProfileInputs.steady_windows`: the interval records after the warm-up, without the
    torch.profiler window's; start-up, evaluation and the final snapshot lie outside), and the
    number of those samples. GPUs with no busy sample in the whole timeline (not used by the run)
    are left out; an empty Series when no sample lies in the windows.

    >>> timeline = pd.DataFrame({"t_s": [-5.0, 1.0, 2.0, 3.0, 9.0], "gpu": 0, "util_pct": [0, 90, 100, 95, 5]})
    >>> windows = pd.DataFrame({"rank": [0, 0], "from_s": [0.5, 2.5], "to_s": [2.5, 4.0]})
    >>> steady_util(timeline, windows)[0].round(1).tolist(), steady_util(timeline, windows)[1]
    ([95.0], 3)
    """
    util = pd.to_numeric(gpu_timeline["util_pct"], errors="coerce")
    used = util.groupby(gpu_timeline["gpu"]).max() > 0
    t_s = pd.to_numeric(gpu_timeline["t_s"], errors="coerce").to_numpy(float)
    steady = gpu_timeline[in_windows(t_s, windows) & util.notna().to_numpy()]
    steady = steady[steady["gpu"].map(used).astype(bool)]
    means = pd.to_numeric(steady["util_pct"]).groupby(steady["gpu"], sort=True).mean().astype(float)
    return means, int(len(steady))


def active_util(gpu_timeline: pd.DataFrame) -> pd.Series:
    """Mean ``util_pct`` per GPU over its active window: from its first to its last sample with
    utilisation > 0 (leaves out process start-up, scene loading and the idle tail)."""
    out = {}
    for gpu, group in gpu_timeline.sort_values("t_s").groupby("gpu", sort=True):
        util = pd.to_numeric(group["util_pct"], errors="coerce").dropna().reset_index(drop=True)
        busy = util.index[util > 0]
        out[gpu] = float(util.iloc[busy[0] : busy[-1] + 1].mean()) if len(busy) else 0.0
    return pd.Series(out, dtype=float)


def idle_share(overlap: pd.DataFrame) -> float | None:
    """Share of the traced window in which no kernel ran, over all ranks (None when unknown)."""
    if "window_ms" in overlap.columns:
        window = pd.to_numeric(overlap["window_ms"], errors="coerce")
    else:
        window = overlap["compute_ms"] + overlap["exposed_comm_ms"] + overlap["idle_ms"]
    total = float(window.sum())
    return float(pd.to_numeric(overlap["idle_ms"], errors="coerce").sum()) / total if total > 0 else None


def check(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    """Evaluated from NVML utilisation only, averaged over the steady training window
    (:func:`steady_util`; each GPU's active window, :func:`active_util`, when it is unknown): a
    trace's idle time is evidence of launch gaps on a GPU, but on a CPU-only trace it is host
    overhead, not an under-used device."""
    name, threshold = NAME, THRESHOLD
    timeline = inputs.gpu_timeline
    if timeline is None or len(timeline) == 0 or not pd.to_numeric(timeline["util_pct"], errors="coerce").notna().any():
        return not_evaluated(name, threshold, "needs GPU utilisation samples (NVML); none were collected (no GPU?)")
    if not phases_timed(means):
        return not_evaluated(name, threshold, NO_PHASES + "; they rule out waits on data and communication")
    util, samples = (steady_util(timeline, inputs.steady_windows) if inputs.steady_windows is not None
                     and len(inputs.steady_windows) else (pd.Series(dtype=float), 0))
    if len(util):
        windows = inputs.steady_windows
        where = (f"over the steady training window (t_s {windows['from_s'].min():.1f}–{windows['to_s'].max():.1f} s, "
                 f"{samples} samples: the interval records after the warm-up, without start-up, the "
                 "torch.profiler window, evaluation and the final snapshot)")
    else:
        util = active_util(timeline)
        where = "over each GPU's active window (first to last busy sample: the steady window is unknown)"
    value = float(util.mean())
    per_gpu = ", ".join(f"GPU {g} {u:.0f}%" for g, u in util.items())
    evidence = f"mean GPU utilisation {value:.0f}% ({per_gpu}) {where}, threshold {threshold:.0f}%"
    if inputs.overlap is not None and len(inputs.overlap):
        idle = idle_share(inputs.overlap)
        if idle is not None:
            evidence += f"; no kernel runs in {idle:.0%} of the traced window (launch gaps)"
    drawing = data.batch_share(inputs, means)  # a captured step: the replays' ray kernels, not the eager phase
    data_share = drawing.value if drawing.value is not None else 0.0
    comm_share = rank_share(means, "comm", largest=False)[1] if inputs.world_size > 1 else 0.0
    data_text = f"data {data_share:.1%}" if drawing.value is not None else "data not measured (see data_loading)"
    evidence += f"; {data_text} and exposed communication {comm_share:.1%} of the step"
    explained = data_share > data.THRESHOLD or comm_share > communication.THRESHOLD
    if value < threshold and explained:
        evidence += ", which explain the low utilisation (see those diagnoses)"
    fires = value < threshold and not explained
    return verdict(name, value, threshold, 100.0, evidence, KNOB, inputs.config, fires=fires)

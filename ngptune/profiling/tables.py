"""The profile tables: the CSV files ``ngptune profile`` writes into a profile folder, which the
report and the diagnoses read (column names carry their units, like the trainer's metrics in
:mod:`trainer.contract.metrics`), and how the driver groups the trainer's step phases.
"""

from __future__ import annotations

__all__ = [
    "COMPUTE_PHASES", "DIAGNOSES_TABLE", "GPU_TIMELINE_TABLE", "KERNELS_TABLE", "OVERLAP_TABLE", "PHASES_TABLE",
    "SUMMARY_TABLE", "WAIT_PHASES",
]


PHASES_TABLE: tuple[str, ...] = ("rank", "step", "phase", "time_ms")
"""phases.csv: mean time per step of each phase (and "other") over each logging interval ending at ``step``."""

SUMMARY_TABLE: tuple[str, ...] = (
    "rank", "steps", "step_kind", "step_time_ms", "steps_per_s", "compute_ms", "wait_ms", "data_ms",
    "occupancy_update_ms", "other_ms", "throughput_samples_per_s", "rays_per_s", "rank_throughput_samples_per_s", "rank_rays_per_s", "imbalance",
    "comm_ms", "comm_busbw_gb_per_s", "link_busbw_gb_per_s", "phase_coverage",
)
"""summary.csv: one row per rank, means over the run's interval records after the warm-up
(step_kind: captured, fixed or dynamic, empty when the records do not say; step_time_ms and
steps_per_s: every step of the intervals, graph replays included; compute_ms (COMPUTE_PHASES),
wait_ms (WAIT_PHASES), data_ms, occupancy_update_ms and other_ms (not in a named phase) are the
parts of step_time_ms and add up to it; with a captured step the phase columns compute_ms, wait_ms,
data_ms and comm_ms are the sampled eager step's of each interval (a separate measurement: a replay
has no phases) and other_ms and phase_coverage are empty, else phase_coverage = named phases / step
time;
throughput_samples_per_s and rays_per_s: the whole job's, all ranks together, the same on every
row; rank_throughput_samples_per_s and rank_rays_per_s: the rank's own rays and samples (a run
whose records lack them: its job columns);
link_busbw_gb_per_s: the all-reduce busbw the ranks' link carries, GB/s, from bench-comm or given,
the same on every row, empty when unknown)."""

GPU_TIMELINE_TABLE: tuple[str, ...] = (
    "t_s", "gpu", "util_pct", "mem_util_pct", "mem_used_mib", "power_w", "temp_c", "sm_clock_mhz",
    "mem_clock_mhz", "throttle_reasons", "pcie_tx_kib_per_s", "pcie_rx_kib_per_s",
    "nvlink_tx_kib_per_s", "nvlink_rx_kib_per_s",
)
"""gpu_timeline.csv: NVML samples, one row per GPU and sampling time; t_s is seconds since the
training loop started (status.json ``train_start_unix_s``; negative during set-up)."""

KERNELS_TABLE: tuple[str, ...] = ("rank", "name", "category", "calls", "total_ms", "mean_us", "share_pct")
"""kernels.csv: device kernels (GPU traces) or top-level operators (CPU traces) of the trace window."""

OVERLAP_TABLE: tuple[str, ...] = (
    "rank", "window_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlapped_comm_ms", "idle_ms",
)
"""overlap.csv: per rank, busy time of compute and communication kernels in the trace window."""

DIAGNOSES_TABLE: tuple[str, ...] = ("bottleneck", "fired", "severity", "value", "threshold", "evidence", "knob")
"""diagnoses.csv: every bottleneck of DESIGN.md §4, whether it fired, and why."""

COMPUTE_PHASES: tuple[str, ...] = ("march", "compact", "field_forward", "render", "backward", "optimizer")
"""Phases that are the rank's own compute (the rest is data, waits and bookkeeping)."""

WAIT_PHASES: tuple[str, ...] = ("comm", "balance")
"""Phases where a rank waits for the others (collectives)."""

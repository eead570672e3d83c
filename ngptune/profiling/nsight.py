"""Nsight Systems and Nsight Compute around a trainer run, used only when the tools are on PATH.

* ``nsys``: the trainer command runs under ``nsys profile --capture-range=cudaProfilerApi``; the
  trainer opens the capture with ``cudaProfilerStart/Stop`` around its profiling window
  (``profile.cuda_profiler_range=true``), so only the window is recorded, with the phase NVTX
  ranges of the phase timer. ``nsys stats --format csv`` then writes one ``nsys_<report>.csv``
  per report of :data:`NSYS_REPORTS` into the profile folder.
* ``ncu``: a separate short trainer run under ``ncu --kernel-name regex:<hash-grid kernels>``
  (:data:`HASH_GRID_KERNEL_REGEX`: the Triton backend's ``_hash_grid_forward/backward_kernel``,
  tiny-cuda-nn's ``kernel_grid*``), exported with ``ncu --import ... --csv`` to
  ``ncu_hashgrid.csv``. Kernel replay slows every profiled launch by orders of magnitude, which is
  why it never wraps the measured run.

When a tool is absent or fails, the caller records the reason as a missing or failed source;
nothing is made up.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from ngptune.profiling import SourceStatus

NSYS_REPORTS: tuple[str, ...] = ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum")
HASH_GRID_KERNEL_REGEX = "hash_?grid|kernel_grid"
NCU_LAUNCH_COUNT = 20  # hash-grid launches profiled (forward and backward of a few steps)
TOOL_TIMEOUT_S = 1800


def find_tool(name: str) -> str | None:
    """Absolute path of ``name`` on PATH, or None."""
    return shutil.which(name)


def nsys_command(nsys: str, report_base: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped in ``nsys profile``, capturing only between cudaProfilerStart and Stop.

    The report is written to ``report_base`` + ``.nsys-rep``. Child processes (ranks started by
    the elastic launcher) are followed, as ``nsys profile`` does by default.
    """
    return [
        nsys, "profile",
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
        "--trace=cuda,nvtx,osrt", "--force-overwrite=true",
        "-o", str(report_base),
        *argv,
    ]


def nsys_stats(nsys: str, report: Path, out_prefix: Path) -> tuple[list[Path], SourceStatus]:
    """Run ``nsys stats --format csv`` on ``report`` for :data:`NSYS_REPORTS`.

    ``nsys`` writes ``<out_prefix>_<report>.csv`` for each report it could compute.

    Returns:
        the CSV files written, and the source status (``failed`` naming the exit code and the
        last line of nsys's output when nothing came out).
    """
    if not report.is_file():
        return [], SourceStatus("failed", f"nsys wrote no report {report} (no cudaProfilerStart reached?)")
    cmd = [nsys, "stats", "--format", "csv", "--force-export=true", "--output", str(out_prefix)]
    for name in NSYS_REPORTS:
        cmd += ["--report", name]
    proc = subprocess.run([*cmd, str(report)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    files = [p for p in (Path(f"{out_prefix}_{name}.csv") for name in NSYS_REPORTS) if p.is_file()]
    if not files:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return [], SourceStatus("failed", f"nsys stats exited {proc.returncode} without CSV: {last[0]}")
    return files, SourceStatus("ok", f"{report.name}: " + ", ".join(p.name for p in files))


def ncu_command(ncu: str, report_base: Path, argv: Sequence[str], launch_count: int = NCU_LAUNCH_COUNT) -> list[str]:
    """``argv`` wrapped in ``ncu``, profiling the first ``launch_count`` hash-grid kernel launches
    of every process; the report goes to ``report_base`` + ``.ncu-rep``."""
    return [
        ncu,
        "--kernel-name", f"regex:{HASH_GRID_KERNEL_REGEX}",
        "--launch-count", str(launch_count),
        "--target-processes", "all",
        "--force-overwrite",
        "-o", str(report_base),
        *argv,
    ]


def ncu_export(ncu: str, report: Path, csv_path: Path) -> SourceStatus:
    """Write ``ncu --import <report> --csv --page details`` to ``csv_path``."""
    if not report.is_file():
        return SourceStatus(
            "failed",
            f"ncu wrote no report {report}: no kernel matched regex:{HASH_GRID_KERNEL_REGEX} "
            "(hash-grid kernels exist with encoding.backend=triton or tcnn on CUDA)",
        )
    proc = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "details"],
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return SourceStatus("failed", f"ncu --import exited {proc.returncode}: {last[0]}")
    csv_path.write_text(proc.stdout, encoding="utf-8")
    return SourceStatus("ok", f"{report.name} → {csv_path.name}")


def not_requested(flag: str) -> SourceStatus:
    return SourceStatus("missing", f"not requested ({flag})")


def not_on_path(tool: str) -> SourceStatus:
    return SourceStatus("missing", f"{tool} not found on PATH")

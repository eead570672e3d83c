"""What the ranks' link can carry: the all-reduce bus bandwidth that ``ngptune profile`` compares
the gradient all-reduce's achieved busbw with (DESIGN.md §4, diagnosis 4).

``ngptune profile --link-busbw auto|off|GB_PER_S [--bench-comm-csv FILE]``:

* ``auto`` (default), more than one rank: one ``bench-comm`` launch before the training run
  (:func:`measure_link_busbw`, through :func:`ngptune.commbench.run_comm_bench`) with the
  profiled run's ranks, backend and emulated interconnect (:func:`link_bench_config`),
  all-reduce only, at a **fixed** :data:`LINK_BENCH_SIZE_BYTES` = 64 MiB rather than the run's own
  gradient bytes: it is about the gradient of the default field (16 levels of at most 2^19
  entries × 2 float32 features ≈ 64 MiB; the MLPs add < 0.1 %), a size at which nccl-tests'
  busbw has reached its plateau (what the link can do, not its latency), and the size of the
  interconnect figures in ANCHORS.md. Its table is kept in the profile folder
  (:attr:`ngptune.profiling.collect.ProfileDir.bench_comm_csv_path`). One rank: there is no
  gradient all-reduce and nothing is measured.
* ``auto`` with ``--bench-comm-csv FILE``: the figure comes from a table ``ngptune bench-comm
  --csv`` wrote (:func:`read_link_busbw`) instead.
* a number: the link's busbw in GB/s as given.
* ``off``: no link figure (the communication diagnosis then says the link bandwidth is unknown).

From a table, the figure is the busbw of the ``all_reduce`` row whose size is nearest to 64 MiB
(log scale; the larger size on a tie); with several NCCL settings at that size, the best one.
busbw follows nccl-tests (``PERFORMANCE.md``): ``algbw · 2(n−1)/n`` for all-reduce, comparable
across world sizes. GB/s are 10^9 B/s.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ngptune.errors import NgptuneError, USER_ERRORS
from ngptune.commbench import COLUMNS, CommBenchConfig, run_comm_bench, write_table_csv
from ngptune.profiling import SourceStatus
from ngptune.profiling.collect import read_csv_table
from trainer.contract import EMULATED_INTERCONNECT_ENV, ConfigError, TrainConfig, choose_backend

__all__ = [
    "LINK_BENCH_SIZE_BYTES",
    "LinkBandwidthError",
    "link_bench_config",
    "link_busbw_of_table",
    "measure_link_busbw",
    "parse_link_busbw",
    "read_link_busbw",
]

LINK_BENCH_SIZE_BYTES = 64 * 2**20
"""All-reduce size of the link measurement and the reference size for picking a table row (bytes)."""

_NUMERIC_COLUMNS = ("size_bytes", "busbw_gb_per_s", "world_size")
_INTEGER_COLUMNS = ("size_bytes", "world_size")
_OP = "all_reduce"


class LinkBandwidthError(NgptuneError):
    """A bench-comm table that cannot give the link's bandwidth (names the file and the problem)."""


def parse_link_busbw(text: str) -> str | float:
    """``--link-busbw``: ``"auto"``, ``"off"`` or a bandwidth in GB/s (> 0, returned as float).

    Raises:
        ConfigError: naming ``--link-busbw`` for anything else.
    """
    value = text.strip().lower()
    if value in ("auto", "off"):
        return value
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (number > 0 and math.isfinite(number)):
        raise ConfigError(f"--link-busbw: expected auto, off or the link's busbw in GB/s (> 0), got {text!r}")
    return number


def _size_text(size_bytes: int) -> str:
    return f"{size_bytes / 2**20:g} MiB" if size_bytes >= 2**20 else f"{size_bytes} B"


def _same_link(a: str, b: str) -> bool:
    """Whether two ``emulate_interconnect`` names set the same NCCL variables (none = nvlink)."""
    return EMULATED_INTERCONNECT_ENV.get(a, {a: a}) == EMULATED_INTERCONNECT_ENV.get(b, {b: b})


def _describe(row: pd.Series) -> str:
    emulated = "" if row["emulated_interconnect"] in ("none", "") else f", emulated {row['emulated_interconnect']}"
    settings = "" if row["settings"] == "default" else f", NCCL {row['settings']}"
    return (f"all_reduce of {_size_text(int(row['size_bytes']))} on {int(row['world_size'])} {row['backend']} ranks"
            f"{emulated}{settings}: busbw {float(row['busbw_gb_per_s']):.3g} GB/s")


def link_busbw_of_table(table: pd.DataFrame, where: str) -> pd.Series:
    """The row of a bench-comm table that stands for the link (module docstring): ``all_reduce``,
    size nearest :data:`LINK_BENCH_SIZE_BYTES` on a log scale (larger on a tie), best busbw.

    Args:
        table: :data:`ngptune.commbench.COLUMNS` with numeric ``size_bytes`` and ``busbw_gb_per_s``.
        where: the table's file, for errors.

    Raises:
        LinkBandwidthError: the table has no ``all_reduce`` row.
    """
    reduce = table[table["op"] == _OP]
    if reduce.empty:
        ops = ", ".join(sorted(set(map(str, table["op"])))) or "none"
        raise LinkBandwidthError(f"{where}: no all_reduce rows (ops: {ops}); measure the link with "
                                 "ngptune bench-comm --ops all_reduce")
    sizes = reduce["size_bytes"].astype(float)
    distance = (sizes.map(math.log2) - math.log2(LINK_BENCH_SIZE_BYTES)).abs()
    nearest = reduce[distance == distance.min()]
    nearest = nearest[nearest["size_bytes"] == nearest["size_bytes"].max()]
    return nearest.loc[nearest["busbw_gb_per_s"].astype(float).idxmax()]


def _read_table(path: Path) -> pd.DataFrame:
    if path.is_dir():
        raise LinkBandwidthError(f"{path}: is a folder, expected the CSV file ngptune bench-comm --csv wrote")
    if not path.is_file():
        raise LinkBandwidthError(f"{path}: bench-comm table not found")
    table = read_csv_table(path, COLUMNS, LinkBandwidthError, dtype=str, keep_default_na=False)
    if table.empty:
        raise LinkBandwidthError(f"{path}: no rows, only the header (truncated?)")
    incomplete = table[list(COLUMNS)].isna().any(axis=1) | (table[list(COLUMNS)] == "").any(axis=1)
    if incomplete.any():
        raise LinkBandwidthError(f"{path}: row {int(incomplete.idxmax()) + 1} is incomplete (truncated file?)")
    for column in _NUMERIC_COLUMNS:
        values = pd.to_numeric(table[column], errors="coerce")
        bad = ~(values > 0) | ~values.map(math.isfinite)
        kind = "a positive number"
        if column in _INTEGER_COLUMNS and not bad.any():
            bad, kind = values != values.round(), "a positive integer"
        if bad.any():
            i = int(bad.idxmax())
            raise LinkBandwidthError(f"{path}: row {i + 1}: {column} must be {kind}, got {table.at[i, column]!r}")
        table[column] = values
    return table


def read_link_busbw(path: Path, *, emulated_interconnect: str, world_size: int) -> tuple[float, SourceStatus]:
    """The link's busbw from a table ``ngptune bench-comm --csv`` wrote (``--bench-comm-csv``).

    Args:
        path: the CSV file (columns :data:`ngptune.commbench.COLUMNS`).
        emulated_interconnect: the profiled run's ``distributed.emulate_interconnect``; only rows
            measured on the same link count.
        world_size: the profiled run's ranks (a table of another world size is used, and the
            ``link_busbw`` source detail says so).

    Returns:
        ``(busbw_gb_per_s, status)``: the figure (GB/s) and the ``link_busbw`` source entry.

    Raises:
        LinkBandwidthError: naming the file: missing, empty, not CSV, not a bench-comm table,
            truncated (incomplete rows), non-positive numbers, no ``all_reduce`` row, or no row of
            the run's emulated interconnect.
    """
    path = Path(path)
    table = _read_table(path)
    same = table["emulated_interconnect"].map(lambda name: _same_link(name, emulated_interconnect))
    if not same.any():
        measured = ", ".join(sorted(set(table["emulated_interconnect"])))
        raise LinkBandwidthError(
            f"{path}: measured with emulated interconnect {measured}, but the profiled run emulates "
            f"{emulated_interconnect!r}; measure with ngptune bench-comm --emulate-interconnect {emulated_interconnect}"
        )
    row = link_busbw_of_table(table[same], str(path))
    detail = f"{_describe(row)}, from {path}"
    if int(row["world_size"]) != world_size:
        detail += f" (measured on {int(row['world_size'])} ranks, this run has {world_size})"
    return float(row["busbw_gb_per_s"]), SourceStatus("ok", detail)


def link_bench_config(cfg: TrainConfig, nproc_per_node: int) -> CommBenchConfig:
    """The bench-comm measurement of the profiled run's link: its ranks, backend (NCCL on GPUs,
    gloo on CPUs, or ``distributed.backend``), emulated interconnect and collective timeout;
    all-reduce of :data:`LINK_BENCH_SIZE_BYTES` only.

    Raises:
        ConfigError: the combination cannot be measured (e.g. an emulated interconnect on gloo).
    """
    from ngptune.processes import cuda_device_count

    on_cuda = cfg.training.device != "cpu" and cuda_device_count() >= nproc_per_node
    return CommBenchConfig(
        nproc_per_node=nproc_per_node,
        sizes_bytes=(LINK_BENCH_SIZE_BYTES,),
        ops=(_OP,),
        backend=choose_backend(cfg.distributed.backend, on_cuda),
        emulate_interconnect=cfg.distributed.emulate_interconnect,
        timeout_s=cfg.distributed.timeout_s,
    )


def measure_link_busbw(
    cfg: TrainConfig, nproc_per_node: int, out_dir: Path, csv_path: Path
) -> tuple[float | None, SourceStatus]:
    """Measure the link as the profiled run will use it (:func:`link_bench_config`): one launch of
    ``nproc_per_node`` ranks, logs under ``out_dir``, the table written to ``csv_path``.

    Returns:
        ``(busbw_gb_per_s, status)``; on any failure ``(None, failed status)`` with the reason
        (the profile goes on without the figure).
    """
    try:
        bench = link_bench_config(cfg, nproc_per_node)
        table = run_comm_bench(bench, out_dir)
        write_table_csv(table, csv_path, "the link's table")
        row = link_busbw_of_table(table, str(csv_path))
    except (*USER_ERRORS, OSError, ValueError) as exc:
        return None, SourceStatus("failed", f"the link measurement (bench-comm) failed: {exc}")
    detail = f"{_describe(row)}, measured before training ({csv_path.name}; rank logs in {out_dir})"
    return float(row["busbw_gb_per_s"]), SourceStatus("ok", detail)

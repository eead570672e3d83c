"""The metrics schema: every column the trainer writes and the driver reads, with its unit.

This is the single owner of metric names. ``metrics.jsonl`` holds one JSON object per logging
interval whose keys are :data:`METRICS_COLUMNS` names (units are part of the names). The profiler and
the tuner read these files through the names defined here; nothing else spells them.

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from trainer.contract.errors import TrainerError

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Column:
    """One metric: its name (unit suffixed), unit and meaning."""

    name: str
    unit: str
    description: str
    required: bool = False


# Phases of one training step, in order. Their times are reported as ``<phase>_ms`` (mean per
# step over the logging interval). "other" is the step time the named phases do not cover.
PHASES: tuple[str, ...] = (
    "data",
    "march",
    "compact",
    "field_forward",
    "render",
    "backward",
    "comm",
    "optimizer",
    "occupancy_update",
    "balance",
)


def phase_column(phase: str) -> str:
    """Column name of a phase's mean time per step: ``"<phase>_ms"``."""
    if phase not in PHASES and phase != "other":
        raise KeyError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}, other")
    return f"{phase}_ms"


TEXT_COLUMNS = frozenset({"emulated_interconnect", "step_kind"})  # string values; every other column is a number

METRICS_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "", "metrics schema version", required=True),
    Column("rank", "", "rank that wrote the record (0 in single-process runs)", required=True),
    Column("world_size", "", "number of ranks", required=True),
    Column("step", "", "optimiser steps completed when the record was written", required=True),
    Column("wall_time_s", "s", "seconds since training started (excludes set-up)", required=True),
    Column("unix_time_s", "s", "wall clock (time.time()) when the record was written, at the end of its interval; "
                               "puts the records on another process's clock (the profile's NVML samples)"),
    Column("loss", "", "mean training loss over the interval", required=True),
    Column("train_psnr_db", "dB", "PSNR of the training batches over the interval (from MSE)"),
    Column("lr", "", "learning rate at the end of the interval"),
    Column("rays_per_step", "rays", "mean rays per step over the interval, of the whole job (all ranks)"),
    Column("samples_per_step", "samples", "mean ray samples per step over the interval, of the whole job (all ranks)"),
    Column("rays_per_s", "rays/s", "training rays per second over the interval, of the whole job (all ranks; the same on every rank's record)"),
    Column("throughput_samples_per_s", "samples/s", "training samples per second over the interval, of the whole job (all ranks; the same on every rank's record)", required=True),
    Column("rank_rays_per_s", "rays/s", "training rays per second this rank processed itself (= rays_per_s in one process)"),
    Column("rank_throughput_samples_per_s", "samples/s", "training samples per second this rank processed itself (= throughput_samples_per_s in one process)"),
    Column("steps_per_s", "steps/s", "optimiser steps per second over the interval"),
    Column("timed_steps", "steps", "steps of the interval its times and rates cover; 0: it held only start-up steps, whose own time (compilation included) they cover"),
    Column("step_time_ms", "ms", "mean wall-clock time per step over the interval", required=True),
    *(Column(f"{p}_ms", "ms", f"mean time per step in phase '{p}'") for p in PHASES),
    Column("other_ms", "ms", "mean time per step not covered by a named phase"),
    Column("occupancy_fraction", "", "fraction of occupancy-grid cells marked occupied"),
    Column("skipped_steps", "steps", "steps skipped over the interval (fp16 overflow, no samples)"),
    Column("samples_clipped", "samples", "marched samples left out by the fixed sample capacity over the interval (whole rays)"),
    Column("ray_capacity", "rays", "rays a fixed-capacity step draws (its buffers' size) at the end of the interval"),
    Column("sample_capacity", "samples", "marched samples a fixed-capacity step holds at the end of the interval"),
    Column("startup_s", "s", "seconds of start-up before the training clock (set-up, kernel compilation, first occupancy pass, graph capture; first record after it only)"),
    Column("startup_steps", "steps", "optimiser steps run during start-up (first record after it only)"),
    Column("kernels_compiled", "", "Triton kernels compiled during start-up; 0 = every kernel came from the cache (first record after it only)"),
    Column("step_kind", "", "the training step: captured, fixed or dynamic (first record after start-up only)"),
    Column("recaptures", "", "times the fixed-capacity step's buffers grew (and its CUDA graph was captured again) since the start"),
    Column("grad_scale", "", "fp16 gradient scaler's scale (1 when unused)"),
    Column("mem_allocated_mib", "MiB", "peak device memory allocated by tensors over the interval"),
    Column("mem_reserved_mib", "MiB", "device memory reserved by the caching allocator"),
    Column("host_rss_mib", "MiB", "resident memory of the process"),
    Column("imbalance", "", "max/mean per-rank compute time (1 = balanced)"),
    Column("ray_share", "", "this rank's share of the global rays per step"),
    Column("comm_bytes_per_step", "B", "bytes all-reduced per rank per step for gradients (data parallel)"),
    Column("comm_busbw_gb_per_s", "GB/s", "gradient all-reduce bus bandwidth, nccl-tests convention (10^9 B/s; exposed wait only with overlap)"),
    Column("eval_psnr_db", "dB", "mean PSNR over the evaluation images (records written after an evaluation)"),
    Column("eval_ssim", "", "mean SSIM over the evaluation images"),
    Column("emulated_interconnect", "", "interconnect emulated through NCCL variables, or empty"),
)

COLUMNS_BY_NAME: dict[str, Column] = {c.name: c for c in METRICS_COLUMNS}


# ------------------------------------------------------------------ numbers a person reads
# The unit of a quantity is the end of its name (a metrics column, a profile or study table
# column, a status.json key): the terminal tables, the reports and the progress lines show every
# value with it, at the precision it is read at.

_UNIT_SUFFIXES: tuple[tuple[str, str, str], ...] = (
    # (name suffix, unit, style): "fixed2" two decimals, "fixed1" one, "fixed0" none, "si" 3
    # significant digits with an SI prefix, "sig3" 3 significant digits, "percent1" a fraction
    # as a percentage with one decimal
    ("occupancy_fraction", "%", "percent1"),
    ("samples_per_ray", "", "fixed1"),
    ("_gb_per_s", "GB/s", "sig3"),
    ("_kib_per_s", "KiB/s", "si"),
    ("_per_s", "/s", "si"),
    ("_db", "dB", "fixed2"),
    ("_ms", "ms", "fixed1"),
    ("_us", "µs", "fixed1"),
    ("_s", "s", "fixed1"),
    ("_pct", "%", "fixed1"),
    ("_mib", "MiB", "fixed0"),
    ("_w", "W", "fixed0"),
    ("_mhz", "MHz", "fixed0"),
    ("_c", "°C", "fixed0"),
    ("_b", "B", "si"),
)
_PLAIN_SIG3 = ("ssim", "imbalance", "fraction", "coverage", "share", "lr", "loss", "ratio")


def si_number(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits and an SI prefix: ``6.10 M``, ``77.6 k``,
    ``512``, ``0.25`` (no prefix below 1000).

    >>> si_number(6104850.0), si_number(77600), si_number(512), si_number(0.25)
    ('6.10 M', '77.6 k', '512', '0.250')
    """
    if not math.isfinite(value) or value == 0:
        return str(value) if value else "0"
    rounded = float(f"{value:.{digits}g}")  # 999.8 at 3 digits is 1.00 k, not 1000
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(rounded) >= factor:
            return f"{significant(rounded / factor, digits)} {prefix}"
    return significant(rounded, digits)


def si_count(count: int | float, digits: int = 3) -> str:
    """A count (rays, points, samples) with an SI prefix from 1000 on, whole below it: ``64``,
    ``512``, ``10.2 k`` (:func:`si_number` would write ``64.0``)."""
    if math.isfinite(count) and abs(count) < 1000 and count == int(count):
        return str(int(count))
    return si_number(count, digits)


def significant(value: float, digits: int = 3) -> str:
    """``value`` rounded to ``digits`` significant digits, in fixed notation (``0.0123``, ``34.2``)."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    if decimals == 0 and len(text.lstrip("-")) > digits:  # 1234.5 at 3 digits: 1230
        text = f"{round(value, digits - len(text.lstrip('-'))):.0f}"
    return text


def unit_of(name: str) -> str:
    """The unit a quantity's name ends with (``psnr_db`` → ``dB``, ``throughput_samples_per_s`` →
    ``samples/s``, ``step_time_ms`` → ``ms``; a remark in parentheses after the name, ``psnr_db
    (max)``, is left out), or ``""``."""
    base = name.lower().split(" (")[0]
    for suffix, unit, _ in _UNIT_SUFFIXES:
        if base.endswith(suffix):
            if suffix == "_per_s":
                counted = base[: -len(suffix)].rsplit("_", 1)[-1]
                return f"{counted}/s" if counted not in ("", "throughput") else "/s"
            return unit
    return ""


def number_text(name: str, value: Any) -> str:
    """``value`` of the quantity ``name`` at the precision it is read at, without its unit: dB and
    ms with 2 and 1 decimals, seconds and samples per ray with 1, the occupancy fraction as a
    percentage with 1 (``7.6`` %), rates with 3 significant digits and an SI prefix,
    counts as integers, ratios (SSIM, imbalance, fractions) with 3 significant digits; ``""`` for
    None or NaN; text as it is."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, float) and math.isnan(value):
        return ""
    base = name.lower().split(" (")[0]
    for suffix, _, style in _UNIT_SUFFIXES:
        if base.endswith(suffix):
            if style == "si":
                return si_number(float(value))
            if style == "sig3":
                return significant(float(value))
            if style == "percent1":
                return f"{100 * float(value):.1f}"
            return f"{float(value):.{int(style[-1])}f}"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15 and not any(
            word in base for word in _PLAIN_SIG3):
        return str(int(value))
    if any(word in base for word in _PLAIN_SIG3):
        return significant(float(value)) if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return significant(float(value), 4)


def quantity_text(name: str, value: Any) -> str:
    """:func:`number_text` with the unit of :func:`unit_of`: ``34.22 dB``, ``30.0 s``,
    ``6.10 M samples/s``, ``12.3 ms``; ``""`` for a missing value. Microseconds from 1000 on are
    written in ms, GB/s below 1 in MB/s."""
    text = number_text(name, value)
    unit = unit_of(name)
    if not text or not unit or not isinstance(value, (int, float)) or isinstance(value, bool):
        return text
    if unit == "µs" and abs(value) >= 1000:  # a kernel's total time: 208.3 ms, not 208259.7 µs
        return f"{value / 1000:.1f} ms"
    if unit == "GB/s" and 0 < abs(value) < 1:  # a slow link: 59.4 MB/s, not 0.0594 GB/s
        return f"{significant(value * 1000)} MB/s"
    return f"{text} {unit}"


class MetricsError(TrainerError):
    """A metrics file is missing, corrupt, or breaks the schema; names the file and line."""


def validate_record(record: dict[str, Any], where: str = "record") -> None:
    """Check one metrics record against the schema.

    Raises:
        MetricsError: for a missing required column, an unknown column or a non-numeric value.
    """
    for column in METRICS_COLUMNS:
        if column.required and column.name not in record:
            raise MetricsError(f"{where}: missing required column '{column.name}'")
    for key, value in record.items():
        if key not in COLUMNS_BY_NAME:
            raise MetricsError(f"{where}: unknown column '{key}'")
        if key in TEXT_COLUMNS:
            if not isinstance(value, str):
                raise MetricsError(f"{where}: column '{key}' must be a string, got {value!r}")
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise MetricsError(f"{where}: column '{key}' must be a number, got {value!r}")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """Appends schema-checked records to a ``metrics.jsonl`` file, one flushed line per record.

    Args:
        path: the metrics file (appended to; its folder is created).
        mirror: an object with ``write(record)`` and ``close()`` that gets every record after it
            is written (the run's TensorBoard scalars, :mod:`trainer.metrics_tensorboard`), or None.
    """

    def __init__(self, path: Path, mirror: Any = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._mirror = mirror

    def write(self, record: dict[str, Any]) -> None:
        record = {"schema_version": SCHEMA_VERSION, **record}
        validate_record(record, where=str(self.path))
        self._file.write(json.dumps({k: _json_safe(v) for k, v in record.items()}) + "\n")
        self._file.flush()
        if self._mirror is not None:
            self._mirror.write(record)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None

    def __enter__(self) -> "MetricsWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: Path, *, require_contiguous_steps: bool = False) -> list[dict[str, Any]]:
    """Read a ``metrics.jsonl`` file into a list of records (stdlib only).

    A truncated last line (a run killed mid-write) is dropped; any other unparsable line is an error.

    Args:
        path: the metrics file.
        require_contiguous_steps: when True, steps must increase strictly.

    Raises:
        MetricsError: naming the file and line for a missing file, bad JSON or schema violations.
    """
    path = Path(path)
    if not path.is_file():
        raise MetricsError(f"{path}: metrics file not found")
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # last line cut by a kill: everything before it is complete
            raise MetricsError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise MetricsError(f"{path}:{number}: expected a JSON object")
        validate_record(record, where=f"{path}:{number}")
        records.append(record)
    if require_contiguous_steps:
        steps = [r["step"] for r in records]
        for prev, cur in zip(steps, steps[1:]):
            if cur <= prev:
                raise MetricsError(f"{path}: steps do not increase ({prev} then {cur})")
    return records


def truncate_metrics_after(path: Path, step: int) -> int:
    """Drop records of steps after ``step`` (and any cut line) from a metrics file, atomically.

    Used when a run resumes from a snapshot into the same run directory, so the file keeps one
    record per step interval. Returns the number of lines removed; a missing file is left alone.
    """
    from trainer.contract.rundir import atomic_write_text

    path = Path(path)
    if not path.is_file():
        return 0
    kept, removed = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            removed += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step:
            removed += 1
            continue
        kept.append(line)
    if removed:
        atomic_write_text(path, "".join(line + "\n" for line in kept))
    return removed

"""``ngptune monitor``: a live table of every GPU, like ``nvidia-smi -l``, with CSV export.

    ngptune monitor [--interval S] [--csv FILE] [--gpus 0,1] [--count N]

Each refresh reads every selected GPU through NVML (:class:`ngptune.profiling.nvml.GpuReader`:
utilisation, memory, power, temperature, clocks, throttling reasons, PCIe and NVLink rates) and
shows them in a ``rich.live`` table; with ``--csv`` every row is appended and flushed at once
(``gpu_timeline.csv`` columns, :data:`ngptune.profiling.tables.GPU_TIMELINE_TABLE`). Ctrl-C (SIGINT) or
SIGTERM ends it between two refreshes, so the CSV never holds a partial row; ``--count N`` stops
after N refreshes. Without an NVIDIA GPU it exits with ``error: no NVIDIA GPU found (NVML: ...)``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ngptune.profiling.tables import GPU_TIMELINE_TABLE
from trainer.contract import ConfigError, prepare_output_file

if TYPE_CHECKING:
    from ngptune.profiling.nvml import GpuReader


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune monitor`` to the CLI."""
    p = subparsers.add_parser(
        "monitor",
        help="live table of every GPU (utilisation, memory, power, clocks, throttling, PCIe/NVLink); CSV export",
        description="Show every NVIDIA GPU live through NVML, like nvidia-smi -l; Ctrl-C stops (the CSV stays complete).",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--csv", type=Path, default=None, help="append every sample to this CSV file")
    p.add_argument("--gpus", type=parse_gpus, default=None, help="comma-separated NVML indices, e.g. 0,1 (default: all)")
    p.add_argument("--count", type=int, default=None, help="stop after N refreshes (default: until Ctrl-C)")
    p.set_defaults(func=monitor_command)


def parse_gpus(text: str) -> list[int]:
    """``"0,1"`` → [0, 1] (argparse type for ``--gpus``)."""
    try:
        gpus = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU indices like 0,1, got {text!r}") from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"expected distinct non-negative GPU indices like 0,1, got {text!r}")
    return gpus


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _rate(kib_per_s: Any) -> str:
    """KiB/s as MiB/s text (the table is read by eye; the CSV keeps KiB/s)."""
    return "-" if kib_per_s is None else f"{kib_per_s / 1024:.1f}"


def gpu_table(rows: Sequence[dict[str, Any]], names: dict[int, str], t_s: float) -> Table:
    """The rich table of one refresh."""
    table = Table(title=f"ngptune monitor  t={t_s:.1f} s  (Ctrl-C to stop)", title_justify="left")
    for header in ("GPU", "name", "util %", "mem util %", "mem used MiB", "power W", "temp °C", "SM MHz",
                   "mem MHz", "throttle", "PCIe tx/rx MiB/s", "NVLink tx/rx MiB/s"):
        table.add_column(header, justify="left" if header in ("name", "throttle") else "right")
    for r in rows:
        table.add_row(
            str(r["gpu"]), names.get(r["gpu"], ""), _fmt(r["util_pct"]), _fmt(r["mem_util_pct"]),
            _fmt(r["mem_used_mib"]), _fmt(r["power_w"], 1), _fmt(r["temp_c"]), _fmt(r["sm_clock_mhz"]),
            _fmt(r["mem_clock_mhz"]), _fmt(r["throttle_reasons"]),
            f"{_rate(r['pcie_tx_kib_per_s'])} / {_rate(r['pcie_rx_kib_per_s'])}",
            f"{_rate(r['nvlink_tx_kib_per_s'])} / {_rate(r['nvlink_rx_kib_per_s'])}",
        )
    return table


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop`` instead of raising inside a CSV write (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_monitor(
    reader: GpuReader,
    *,
    interval_s: float,
    csv_path: Path | None = None,
    count: int | None = None,
    console: Console | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Refresh the table every ``interval_s`` until ``count`` refreshes, a signal or ``stop``.

    Returns:
        the number of refreshes made.
    """
    stop = stop if stop is not None else threading.Event()
    names = reader.names()
    refreshes = 0
    with contextlib.ExitStack() as stack:
        writer = None
        if csv_path is not None:
            new = not csv_path.exists() or csv_path.stat().st_size == 0
            handle = stack.enter_context(open(csv_path, "a", newline="", encoding="utf-8"))
            writer = csv.DictWriter(handle, fieldnames=list(GPU_TIMELINE_TABLE))
            if new:
                writer.writeheader()
                handle.flush()
        stack.enter_context(_stop_on_signals(stop))
        live = stack.enter_context(Live(console=console or Console(), auto_refresh=False))
        while not stop.is_set():
            rows = reader.read()
            if writer is not None:
                writer.writerows(rows)
                handle.flush()
            refreshes += 1
            live.update(gpu_table(rows, names, rows[0]["t_s"] if rows else 0.0), refresh=True)
            if count is not None and refreshes >= count:
                break
            stop.wait(interval_s)
    return refreshes


def monitor_command(args: argparse.Namespace) -> int:
    """``ngptune monitor`` (module docstring); returns the exit status.

    Raises:
        NvmlUnavailable: no NVIDIA GPU (NVML's reason in the message).
        ConfigError: a bad ``--interval``, ``--count``, ``--csv`` or ``--gpus``.
    """
    if not args.interval > 0:
        raise ConfigError(f"--interval: expected a positive number of seconds, got {args.interval:g}")
    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count: expected an integer >= 1, got {args.count}")
    if args.csv is not None:
        prepare_output_file(args.csv, "--csv")
    from ngptune.profiling.nvml import GpuReader  # loads pandas: not for --help

    reader = GpuReader(args.gpus)
    try:
        run_monitor(reader, interval_s=args.interval, csv_path=args.csv, count=args.count)
    finally:
        reader.close()
    return 0

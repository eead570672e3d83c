"""``ngptune bench-comm``: collective bandwidth of this host's ranks, nccl-tests convention.

    ngptune bench-comm [--nproc-per-node N] [--emulate-interconnect nvlink|pcie|sockets]
        [--sizes 1M,16M,64M] [--ops all_reduce,all_gather] [--iters N] [--warmup N]
        [--nccl-settings "NCCL_ALGO=Ring;NCCL_ALGO=Tree" ...] [--csv FILE] [--backend auto|nccl|gloo]

For each NCCL setting (one by default) the trainer's tool ``python -m trainer.tools.bench_comm``
starts N ranks through the trainer's elastic launcher (the same path as ``python -m trainer
--nproc-per-node``); each rank times ``--iters`` back-to-back calls of every collective at every
size after ``--warmup`` untimed ones (CUDA events on GPUs, ``time.perf_counter`` on the CPU), and
the slowest rank's mean time per collective is reported, as nccl-tests does. Bandwidths (as
training reports them, nccl-tests ``PERFORMANCE.md``)::

    algbw = size_bytes / time          busbw = algbw · 2(n−1)/n   (all_reduce)
                                       busbw = algbw · (n−1)/n    (all_gather, size = whole output)

Sizes take binary suffixes as nccl-tests (``64K`` = 65536 bytes, ``1M`` = 2^20, ``1G`` = 2^30);
each size once, at most 1024G; buffers are float32, so a size is rounded down to a multiple of 4
bytes (all-gather: 4·n). GB/s are 10^9 bytes per second. The CSV is written atomically; a run
stopped midway (Ctrl-C, SIGKILL) writes none, and its ranks stop with it.

``--nccl-settings``: ``;`` separates settings, ``,`` the variables of one setting; the flag may be
repeated. ``--emulate-interconnect`` sets ``NCCL_P2P_DISABLE`` / ``NCCL_SHM_DISABLE`` on every rank
(:data:`trainer.contract.EMULATED_INTERCONNECT_ENV`); both are NCCL-only and rejected on
the gloo backend. The result table (:data:`COLUMNS`) is shown with rich and written as CSV with
``--csv``; :func:`run_comm_bench` returns it as a DataFrame for other code (the profile report
compares the gradient all-reduce's achieved busbw with it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from trainer.contract import (
    BENCH_COMM_OPS,
    BENCH_COMM_RESULT_FILE,
    EMULATED_INTERCONNECT_ENV,
    ConfigError,
    LaunchError,
    RunDir,
    counted,
    fit_lines,
    TrainConfig,
    atomic_write_text,
    choose_backend,
    last_error_message,
    prepare_output_file,
    bench_comm_argv,
)

if TYPE_CHECKING:  # pandas loads on first use: `ngptune --help` imports every command module
    import pandas as pd

__all__ = [
    "COLUMNS", "MAX_SIZE_BYTES", "OPS", "CommBenchConfig", "parse_nccl_settings", "parse_sizes",
    "register", "run_comm_bench", "write_table_csv",
]

OPS = BENCH_COMM_OPS
"""Collectives ``--ops`` accepts."""

COLUMNS = (
    "size_bytes", "count", "op", "time_us", "algbw_gb_per_s", "busbw_gb_per_s", "settings",
    "emulated_interconnect", "backend", "world_size",
)
"""Columns of the result table and CSV (``count``: float32 elements of the size; ``settings``: the
NCCL variables set, ``default`` for none)."""

DEFAULT_SIZES = "1M,16M,64M"
DEFAULT_LABEL = "default"
_BYTES_PER_ELEMENT = 4  # float32 buffers
_SIZE = re.compile(r"^(\d+)\s*([KMG]?)(?:I?B)?$", re.IGNORECASE)
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
MAX_SIZE_BYTES = 2**40
"""Largest ``--sizes`` item (1024G): no host or GPU holds a larger buffer, and far larger numbers
overflow the ranks' tensor sizes."""
_EMULATION_VARIABLES = frozenset(name for env in EMULATED_INTERCONNECT_ENV.values() for name in env)
_VARIABLE = re.compile(r"^NCCL_[A-Z0-9_]+$")


@dataclasses.dataclass(frozen=True)
class CommBenchConfig:
    """What one ``bench-comm`` run measures.

    Attributes:
        nproc_per_node: ranks n (>= 2).
        sizes_bytes: message sizes (bytes, >= 4·n each).
        ops: collectives from :data:`OPS`.
        iters: timed calls per size and op (>= 1).
        warmup: untimed calls before them (>= 0).
        backend: ``"nccl"``, ``"gloo"`` or ``"auto"`` (resolved on construction by
            :func:`resolve_backend`).
        emulate_interconnect: ``"none"``, ``"nvlink"``, ``"pcie"`` or ``"sockets"`` (NCCL only).
        nccl_settings: one dict of NCCL variables per setting to measure; ``({},)`` for the default.
        timeout_s: bound of the rendezvous and of every collective (s).
    """

    nproc_per_node: int
    sizes_bytes: tuple[int, ...]
    ops: tuple[str, ...] = OPS
    iters: int = 20
    warmup: int = 5
    backend: str = "gloo"
    emulate_interconnect: str = "none"
    nccl_settings: tuple[dict[str, str], ...] = ({},)
    timeout_s: float = TrainConfig().distributed.timeout_s

    def __post_init__(self) -> None:
        n = self.nproc_per_node
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"--nproc-per-node: expected an integer >= 2 (a collective needs two ranks), got {n!r}")
        for name, value, lo in (("--iters", self.iters, 1), ("--warmup", self.warmup, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"{name}: expected an integer >= {lo}, got {value!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"--timeout-s: expected a finite number of seconds > 0, got {self.timeout_s!r}")
        unknown = [op for op in self.ops if op not in OPS]
        if not self.ops or unknown:
            raise ConfigError(f"--ops: expected a comma-separated list of {', '.join(OPS)}, got {','.join(self.ops)!r}")
        twice = sorted({op for op in self.ops if self.ops.count(op) > 1})
        if twice:
            raise ConfigError(f"--ops: {', '.join(twice)} appears twice in {','.join(self.ops)!r}; give each collective once")
        smallest = _BYTES_PER_ELEMENT * n
        if not self.sizes_bytes or min(self.sizes_bytes) < smallest:
            raise ConfigError(f"--sizes: every size must be at least {smallest} bytes (one float32 per rank), "
                              f"got {list(self.sizes_bytes)}")
        object.__setattr__(self, "backend", resolve_backend(self.backend, n))
        emulated = EMULATED_INTERCONNECT_ENV[self.emulate_interconnect]
        for setting in self.nccl_settings:
            clash = sorted(set(setting) & set(emulated))
            if clash:
                raise ConfigError(f"--nccl-settings: {', '.join(clash)} is set by --emulate-interconnect "
                                  f"{self.emulate_interconnect}; leave it out of the settings")
            link = sorted(set(setting) & _EMULATION_VARIABLES)
            if link:  # the rows would be labelled with the wrong emulated_interconnect
                raise ConfigError(f"--nccl-settings: {', '.join(link)} changes the link, which --emulate-interconnect "
                                  "(pcie, sockets) sets and the table records; use that flag instead")
        if self.backend == "gloo" and self.emulate_interconnect != "none":
            raise ConfigError(
                f"--emulate-interconnect: {self.emulate_interconnect!r} works through NCCL variables, but bench-comm "
                "runs on the gloo backend here; use --emulate-interconnect none, or the nccl backend on GPUs"
            )
        if self.backend == "gloo" and any(self.nccl_settings):
            raise ConfigError("--nccl-settings: NCCL variables do nothing on the gloo backend; run on GPUs "
                              "(--backend nccl) or leave them out")


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1M,16M,64M"`` → (1048576, 16777216, 67108864); binary suffixes K, M, G (optional B/iB).

    Raises:
        ConfigError: naming ``--sizes`` and the item that is not a size.
    """
    sizes: dict[int, str] = {}
    for item in (part.strip() for part in text.split(",")):
        m = _SIZE.match(item)
        if m is None or int(m.group(1)) == 0:
            raise ConfigError(f"--sizes: expected sizes like 4096,64K,1M,1G (bytes > 0), got {item!r}")
        size = int(m.group(1)) * _SUFFIX[m.group(2).upper()]
        if size > MAX_SIZE_BYTES:
            raise ConfigError(f"--sizes: {item!r} is {size} bytes, more than the largest size {MAX_SIZE_BYTES} (1024G)")
        if size in sizes:
            same = "" if sizes[size] == item else f" (the same as {sizes[size]!r})"
            raise ConfigError(f"--sizes: {item!r} appears twice{same}; give each size once")
        sizes[size] = item
    return tuple(sizes)


def parse_nccl_settings(values: Sequence[str]) -> tuple[dict[str, str], ...]:
    """``["NCCL_ALGO=Ring;NCCL_ALGO=Tree,NCCL_PROTO=LL"]`` → ``({"NCCL_ALGO": "Ring"},
    {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"})``; no values → ``({},)`` (the default setting).

    Raises:
        ConfigError: naming ``--nccl-settings`` and the item for anything but ``NCCL_<NAME>=value``.
    """
    settings = []
    for value in values:
        for group in value.split(";"):
            if not group.strip():
                continue
            setting: dict[str, str] = {}
            for item in group.split(","):
                name, sep, val = item.strip().partition("=")
                if not sep or not _VARIABLE.match(name) or not val.strip():
                    raise ConfigError(f"--nccl-settings: expected NCCL_<NAME>=value items, got {item.strip()!r}")
                if name in setting:
                    raise ConfigError(f"--nccl-settings: {name} appears twice in {group.strip()!r} "
                                      "(separate alternative settings with ';')")
                setting[name] = val.strip()
            settings.append(setting)
    return tuple(settings) or ({},)


def settings_label(setting: dict[str, str]) -> str:
    """``NCCL_ALGO=Ring,NCCL_PROTO=LL``, or ``default`` for no variables."""
    return ",".join(f"{k}={v}" for k, v in setting.items()) or DEFAULT_LABEL


def resolve_backend(backend: str, nproc_per_node: int) -> str:
    """``auto`` → NCCL when this host shows at least ``nproc_per_node`` CUDA devices, else gloo
    (:func:`trainer.contract.choose_backend`).

    Raises:
        ConfigError: ``nccl`` without enough CUDA devices, or an unknown name (naming ``--backend``).
    """
    from ngptune.processes import cuda_device_count

    gpus = cuda_device_count()
    chosen = choose_backend(backend, on_cuda=gpus >= nproc_per_node)
    if chosen == "nccl" and gpus < nproc_per_node:
        raise ConfigError(f"--backend: nccl needs {nproc_per_node} CUDA devices (one per rank), this host shows {gpus}")
    if chosen not in ("nccl", "gloo"):
        raise ConfigError(f"--backend: expected auto, nccl or gloo, got {backend!r}")
    return chosen


def run_comm_bench(config: CommBenchConfig, out_dir: Path) -> pd.DataFrame:
    """Measure every (setting, op, size) of ``config``: one ``python -m trainer.tools.bench_comm``
    launch of ``nproc_per_node`` ranks per NCCL setting, logs in ``out_dir/setting<i>/logs/rank<R>.log``.

    Returns:
        One row per setting, op and size, columns :data:`COLUMNS`.

    Raises:
        LaunchError: a rank or the rendezvous failed (the tool's message: names the rank and its log).
        KeyboardInterrupt: Ctrl-C or SIGTERM reached the ranks (they were stopped).
    """
    import pandas as pd

    from ngptune.processes import run_foreground

    frames = []
    for index, setting in enumerate(config.nccl_settings):
        folder = RunDir(Path(out_dir) / f"setting{index}").create()
        argv = bench_comm_argv(nproc_per_node=config.nproc_per_node, out=folder.root, backend=config.backend,
                               sizes_bytes=config.sizes_bytes, ops=config.ops, iters=config.iters,
                               warmup=config.warmup, emulate_interconnect=config.emulate_interconnect,
                               timeout_s=config.timeout_s)
        result = run_foreground(argv, env={**os.environ, **setting}, capture_stderr=True)
        if result.interrupted or result.returncode == 130:
            raise KeyboardInterrupt
        message = last_error_message(result.stderr)
        for line in result.stderr.splitlines():  # the tool's other lines, as it printed them
            if message is None or message not in line:
                print(line, file=sys.stderr, flush=True)
        if result.returncode != 0:
            raise LaunchError(message or f"bench-comm ranks exited with status {result.returncode}")
        rows = json.loads((folder.root / BENCH_COMM_RESULT_FILE).read_text(encoding="utf-8"))
        frame = pd.DataFrame(rows)
        frame["settings"] = settings_label(setting)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def write_table_csv(frame: pd.DataFrame, path: Path, what: str) -> None:
    """Write ``frame`` as CSV to ``path``: atomically for a file (a kill leaves the old file or the
    whole table, never a half table that looks complete), directly for a device or pipe
    (``/dev/stdout``).

    Raises:
        ConfigError: naming ``what`` and the path when it cannot be written (disk full, read-only...).
    """
    path = Path(path)
    text = frame.to_csv(index=False)
    try:
        if path.exists() and not path.is_file():
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            atomic_write_text(path, text)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write the table ({exc.strerror or exc})") from None


# ------------------------------------------------------------------------------------- command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune bench-comm`` to the CLI."""
    p = subparsers.add_parser(
        "bench-comm",
        help="all-reduce / all-gather bandwidth of this host's ranks (nccl-tests algbw/busbw), CSV export",
        description="Time collectives on N local ranks and print algbw and busbw as nccl-tests does.",
    )
    p.add_argument("--nproc-per-node", type=int, default=None, help="ranks (default: the CUDA devices, else 2)")
    p.add_argument("--emulate-interconnect", choices=tuple(EMULATED_INTERCONNECT_ENV), default="none",
                   help="NCCL only: make one NVLink host's ranks talk like PCIe or sockets")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes, binary suffixes (default {DEFAULT_SIZES})")
    p.add_argument("--ops", default=",".join(OPS), help=f"collectives (default {','.join(OPS)})")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before them (default 5)")
    p.add_argument("--nccl-settings", action="append", default=[], metavar="VAR=V[,VAR=V][;...]",
                   help="NCCL variables to compare: ';' between settings, ',' within one; repeatable")
    p.add_argument("--csv", type=Path, default=None, help="write the table as CSV here")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: NCCL with enough CUDA devices, else gloo")
    p.add_argument("--timeout-s", type=float, default=TrainConfig().distributed.timeout_s,
                   help="bound of the rendezvous and of every collective (s)")
    p.add_argument("--out", type=Path, default=None, help="keep the ranks' logs here (default: a temporary folder)")
    p.set_defaults(func=bench_comm_command)


def _config_from_args(args: argparse.Namespace) -> CommBenchConfig:
    from ngptune.processes import cuda_device_count

    nproc = args.nproc_per_node
    if nproc is None:
        nproc = max(2, cuda_device_count())
    return CommBenchConfig(
        nproc_per_node=nproc,
        sizes_bytes=parse_sizes(args.sizes),
        ops=tuple(op.strip() for op in args.ops.split(",") if op.strip()),
        iters=args.iters,
        warmup=args.warmup,
        backend=args.backend,
        emulate_interconnect=args.emulate_interconnect,
        nccl_settings=parse_nccl_settings(args.nccl_settings),
        timeout_s=args.timeout_s,
    )


def show_table(frame: pd.DataFrame, title: str) -> None:
    """Print the results as a rich table at most 80 columns wide (sizes in bytes and counts with
    SI prefixes, ``1.05 M``; time per operation in ms, bandwidths in GB/s; the CSV keeps every
    digit and ``time_us``); numbers are never broken across lines, the settings column wraps."""
    from ngptune.console import make_console, table_width
    from trainer.contract import si_count
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header in ("settings", "op", "size\n(B)", "count", "time\n(ms)", "algbw\n(GB/s)", "busbw\n(GB/s)"):
        text = header in ("settings", "op")
        table.add_column(header, justify="left" if text else "right", no_wrap=header != "settings",
                         overflow="fold")  # numbers stay whole; the settings column gives way
    for row in frame.itertuples(index=False):
        table.add_row(row.settings.replace(",", "\n"), row.op, si_count(row.size_bytes), si_count(row.count),
                      f"{row.time_us / 1e3:.3g}" if row.time_us < 1e6 else f"{row.time_us / 1e3:.0f}",
                      f"{row.algbw_gb_per_s:.3g}", f"{row.busbw_gb_per_s:.3g}")
    console = make_console()
    console.print(table, width=table_width(console))


def bench_comm_command(args: argparse.Namespace) -> int:
    """``ngptune bench-comm``: measure, show the table, write the CSV. Returns 0.

    Raises:
        ConfigError: a bad flag (names it); LaunchError / WorkersFailed: the ranks failed.
    """
    config = _config_from_args(args)
    if args.csv is not None:
        prepare_output_file(args.csv, "--csv")
    keep = args.out is not None
    if keep and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out}: is a file, expected a folder for the ranks' logs")
    out_dir = Path(args.out) if keep else Path(tempfile.mkdtemp(prefix="ngptune-bench-comm-"))
    runs = len(config.sizes_bytes) * len(config.ops) * max(1, len(config.nccl_settings))
    print("\n".join(fit_lines([f"bench-comm: {counted(config.nproc_per_node, 'rank')} ({config.backend}) take",
                                f"{counted(runs, 'measurement')} (sizes × operations × settings),",
                                f"{config.warmup} warm-up and {config.iters} timed iterations each;",
                                "the table follows when every rank is done"])), flush=True)
    try:
        frame = run_comm_bench(config, out_dir)
    except LaunchError:
        if not keep:
            print(f"bench-comm: rank logs kept in {out_dir}", file=sys.stderr)
        raise
    except KeyboardInterrupt:
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
        print("bench-comm interrupted: the ranks were stopped and no table was written"
              + (f" (rank logs in {out_dir})" if keep else ""), file=sys.stderr)
        return 130
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    emulation = "" if config.emulate_interconnect == "none" else f", emulated {config.emulate_interconnect}"
    show_table(frame, f"bench-comm: {config.nproc_per_node} ranks, {config.backend}{emulation}, "
                      f"{config.iters} iterations; GB = 10^9 B")
    if args.csv is not None:
        write_table_csv(frame, args.csv, "--csv")
    return 0


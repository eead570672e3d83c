"""Progress of trainer runs the driver started (``ngptune profile``, ``ngptune train-many``), read
from what the runs write: rank 0's ``metrics.jsonl`` records (:mod:`trainer.contract.metrics`),
and between two records (one per ``training.log_every`` steps: a short run may have only its
last) the ``progress:`` lines the trainer prints every few seconds into its output file
(:func:`trainer.contract.read_progress_line`; :func:`newest_progress`).

:class:`RunsProgress` shows one row per run: on a terminal a rich table redrawn in place (name,
bar, ``step N/T``, ETA, samples/s; four short columns, so it fits 80 columns; no ETA from a record
of start-up steps only), off a terminal plain lines per run: when its state changes, when its
first step is known, at each :data:`PLAIN_PARTS`-th of its steps, and every :data:`PLAIN_EVERY_S`
seconds while its line has news (a line the same as the last is not repeated), and its outcome
with the step it ended at (``0000: completed at step 100/100``).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from trainer.contract import MetricsError, clock_text, read_metrics, read_progress_line, si_number

__all__ = ["PLAIN_EVERY_S", "PLAIN_PARTS", "RunsProgress", "last_record", "log_progress", "newest_progress"]

PLAIN_EVERY_S = 10.0
PLAIN_PARTS = 4  # off a terminal, also a line when a run reaches the next quarter of its steps
NAME_WIDTH = 16  # a row: name, bar, "step N/T", "eta M:SS", "6.10 M samples/s": under 80 columns
BAR_WIDTH = 12


def last_record(metrics_path: Path) -> dict[str, Any] | None:
    """The newest training record of a ``metrics.jsonl`` (a half-written last line is skipped),
    or None while there is none."""
    try:
        records = read_metrics(metrics_path)
    except (MetricsError, OSError):
        return None
    training = [r for r in records if "step_time_ms" in r]
    return training[-1] if training else None


LOG_TAIL_BYTES = 65536  # the end of an output file searched for its newest progress line


def log_progress(log_path: Path) -> dict[str, Any] | None:
    """The newest ``progress:`` line of a trainer's output file (the launcher's ``rank 0:`` copy
    too) as a record ``{"step", "total", "wall_time_s"}`` (``wall_time_s``: seconds trained), or
    None while it has none."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - LOG_TAIL_BYTES, 0))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        found = read_progress_line(line)
        if found is not None:
            step, total, trained_s = found
            return {"step": step, "total": total, "wall_time_s": trained_s}
    return None


def newest_progress(record: dict[str, Any] | None, log_path: Path) -> dict[str, Any] | None:
    """Of a run's newest metrics ``record`` and its output file's newest progress line
    (:func:`log_progress`), the one at the later step (the record when they tie: it has the
    throughput); None when there is neither."""
    line = log_progress(log_path)
    if line is not None and (record is None or line["step"] > int(record.get("step", 0))):
        return line
    return record


class RunsProgress:
    """Rows of runs and how far each is.

    Args:
        out: where plain lines go (default stdout); the live table is drawn when ``out`` is a
            terminal (or ``console`` is given) and ``plain`` is False.
        plain: plain lines even on a terminal.
        console: a rich console for the live table (tests).
    """

    def __init__(self, out: TextIO | None = None, plain: bool = False, console: Any = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._last_plain: dict[str, tuple[float, str, int]] = {}  # a run's last plain line: when, what, part
        self._live = None
        if not plain and (console is not None or self.out.isatty()):
            from rich.live import Live

            self._live = Live(self, console=console, auto_refresh=console is None, refresh_per_second=2,
                              transient=False)
            self._live.start()

    def __rich__(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        for justify in ("left", "left", "right", "left", "right"):
            table.add_column(justify=justify, no_wrap=True)
        with self._lock:
            rows = list(self.rows.items())
        for name, row in rows:
            bar = ProgressBar(total=max(row["total"] or 1, 1), completed=row["step"], width=BAR_WIDTH)
            shown = name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
            table.add_row(shown, bar, f"step {row['step']}/{row['total'] or '?'}", f"eta {clock_text(row['eta_s'])}",
                          row["state"] if row["state"] != "running" else row["rate"])
        return table

    def add(self, name: str, total: int | None, state: str = "waiting") -> None:
        """A run to show (``total``: its step count, if known)."""
        with self._lock:
            self.rows[name] = {"total": total, "step": 0, "eta_s": None, "rate": "", "state": state, "t0": None}
        self._plain(name, force=True)

    def update(self, name: str, record: dict[str, Any] | None, total: int | None = None) -> None:
        """The run's newest metrics record or progress line (:func:`newest_progress`; None: none
        yet) and its step count when known now (else the progress line's)."""
        with self._lock:
            row = self.rows.setdefault(name, {"total": total, "step": 0, "eta_s": None, "rate": "", "state": "new",
                                              "t0": None})
            began = record is not None and not row.get("reported")  # its first step known: said at once
            row["reported"] = row.get("reported") or record is not None
            row["state"] = "running"
            total = total if total is not None else (record or {}).get("total")
            if total is not None:
                row["total"] = total
            if row["t0"] is None:
                row["t0"] = time.monotonic()
            if record:
                step, wall = int(record.get("step", 0)), float(record.get("wall_time_s") or 0.0)
                row["step"] = step
                startup_only = record.get("timed_steps") == 0  # its wall time is not a training rate
                if row["total"] and step > 0 and wall > 0 and not startup_only:
                    row["eta_s"] = max(0.0, (row["total"] - step) * wall / step)
                rate = record.get("throughput_samples_per_s")
                if record.get("timed_steps") == 0:  # its rate measures the start-up
                    row["rate"] = "start-up"
                elif isinstance(rate, (int, float)):
                    row["rate"] = f"{si_number(rate)} samples/s"  # (a progress line has none: the last stays)
        self._plain(name, force=began)

    def finish(self, name: str, state: str, step: int | None = None) -> None:
        """The run ended: ``state`` (completed, failed, ...) replaces its rate; ``step``, the step
        it ended at (its status), replaces the last one seen, which a look between two of the
        run's records may have left behind. Off a terminal its line ends with the step:
        ``0000: completed at step 100/100``."""
        with self._lock:
            row = self.rows.setdefault(name, {"total": None, "step": 0, "eta_s": None, "rate": "", "state": state,
                                              "t0": None})
            row["state"], row["ended"] = state, True
            row["eta_s"] = 0.0 if state == "completed" else row["eta_s"]
            if step is not None:
                row["step"], row["reported"] = int(step), True
        self._plain(name, force=True)

    def _plain(self, name: str, force: bool = False) -> None:
        """Off a terminal, the run's line when ``force``, or when it differs from its last one and
        :data:`PLAIN_EVERY_S` seconds have passed or the run reached a new :data:`PLAIN_PARTS`-th
        of its steps (module docstring)."""
        if self._live is not None:
            return
        with self._lock:
            row = dict(self.rows[name])
        what = row["state"] if row["state"] != "running" else \
            f"step {row['step']}/{row['total'] or '?'}, eta {clock_text(row['eta_s'])}"
        if row.get("ended") and row.get("reported"):  # a run that ended: where it ended
            what += f" at step {row['step']}" + (f"/{row['total']}" if row["total"] else "")
        extra = f", {row['rate']}" if row["state"] == "running" and row["rate"] else ""
        line = f"{name}: {what}{extra}"
        now = time.monotonic()
        then, last, last_part = self._last_plain.get(name, (None, "", 0))
        part = row["step"] * PLAIN_PARTS // row["total"] if row["total"] and row["step"] < row["total"] else last_part
        due = then is None or now - then >= PLAIN_EVERY_S or part > last_part
        if not force and (line == last or not due):
            return
        self._last_plain[name] = (now, line, max(part, last_part))
        print(line, file=self.out, flush=True)

    def message(self, text: str) -> None:
        """A line above the table (or a plain line)."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.out, flush=True)

    def refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

"""What a training process shows while it trains: a rich progress bar with the ETA on a terminal,
plain lines otherwise (each log record, and a progress line every :data:`PLAIN_PROGRESS_EVERY_S` s)."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["PLAIN_PROGRESS_EVERY_S", "TrainProgress", "clock_text", "eta_seconds"]


PLAIN_PROGRESS_EVERY_S = 10.0
"""Off a TTY (or with --quiet), a plain progress line at most this often (s), besides the log lines."""


def eta_seconds(step: int, train_time_s: float, n_steps: int, time_budget_s: float | None) -> float | None:
    """Seconds of training left: the steps to ``n_steps`` at the mean step time so far
    (``train_time_s / step``; a resumed run's ``train_time_s`` includes its earlier training), or
    the rest of ``time_budget_s`` when that comes first; None before the first step."""
    if step <= 0 or train_time_s <= 0:
        return None
    left = (n_steps - step) * train_time_s / step
    if time_budget_s is not None:
        left = min(left, time_budget_s - train_time_s)
    return max(0.0, left)


def clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


class TrainProgress:
    """Rich progress bar on a TTY (advanced every step, with the ETA), plain lines otherwise (or with
    --quiet): each log record, and a progress line every :data:`PLAIN_PROGRESS_EVERY_S` s."""

    def __init__(self, total: int | None, quiet: bool, time_budget_s: float | None = None) -> None:
        self.plain = quiet or not sys.stdout.isatty()
        self.total = total
        self.time_budget_s = time_budget_s
        self._last_plain = time.perf_counter()
        self._bar = None
        if not self.plain:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                TextColumn("step {task.completed}/{task.total}"),
                TextColumn("eta {task.fields[eta]}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
            )
            self._task = self._bar.add_task("train", total=total, info="", eta="-:--")
            self._bar.start()

    @staticmethod
    def describe(record: dict[str, Any]) -> str:
        psnr = record.get("train_psnr_db")
        psnr_txt = f"{psnr:.2f} dB" if isinstance(psnr, (int, float)) else "-"
        loss = record.get("loss")
        loss_txt = f"{loss:.5f}" if isinstance(loss, (int, float)) else "- (no samples yet)"
        return (
            f"loss {loss_txt}  psnr {psnr_txt}  "
            f"rays/s {record['rays_per_s']:.3g}  samples/s {record['throughput_samples_per_s']:.3g}"
        )

    def log(self, record: dict[str, Any]) -> None:
        if self.plain:
            print(f"step {record['step']}  {self.describe(record)}  t={record['wall_time_s']:.1f}s", flush=True)
            self._last_plain = time.perf_counter()
        else:
            self._bar.update(self._task, completed=record["step"], info=self.describe(record))

    def step(self, step: int, train_time_s: float) -> None:
        """After every training step: advance the bar (plain: a line when the interval has passed)."""
        eta = eta_seconds(step, train_time_s, self.total or step, self.time_budget_s)
        if not self.plain:
            self._bar.update(self._task, completed=step, eta=clock_text(eta))
            return
        now = time.perf_counter()
        if now - self._last_plain >= PLAIN_PROGRESS_EVERY_S:
            self._last_plain = now
            print(f"progress: step {step}/{self.total} ({100 * step / max(self.total or 1, 1):.0f} %), "
                  f"{train_time_s:.0f} s trained, eta {clock_text(eta)}", flush=True)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

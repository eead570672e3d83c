"""A training run's progress on the console: one line that fits the terminal on a TTY (redrawn in
place by rich), plain lines off a TTY (or with ``--quiet``), for training and for the final
evaluation.

The line keeps what says how far the run is: the step count, the ETA and the elapsed time always;
the bar takes the room left (at least :data:`~trainer.contract.textlines.MIN_BAR`); the figures of the last interval follow,
most important first, and drop from the end when the terminal is narrow: rays/s first, then
samples/s, then PSNR, loss last (:func:`~trainer.contract.textlines.fit_progress_line`). At 80 columns a line reads ``train
━━━━━━━━━━━━━━ step 101/2000 eta 12:34 0:01:02 loss 0.01235 psnr 23.46 dB``. The ETA is ``-:--``
until a training rate is known: after the start-up steps (whose time is not training time) and
one timed step after them.

Off a TTY each metrics record prints a plain line that starts with the same three, then the
figures (going on in an indented line past 80 columns)::

    step 101/2000  eta 9:30  t=30.3 s  loss 0.01235  psnr 23.46 dB
      6.10 M samples/s  77.6 k rays/s

and between records a ``progress:`` line
(:func:`trainer.contract.runstatus.progress_line`) every :data:`PLAIN_PROGRESS_EVERY_S` seconds
and at each tenth of the steps, so that a short run's steps show too (the driver follows them:
``ngptune profile``, ``ngptune train-many``). The start-up, which may take minutes on a busy
CPU, is said off a TTY when it begins (:data:`STARTUP_BEGINS`) and, with its seconds, when it ends.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from trainer.contract.metrics import si_count, si_number
from trainer.contract.runstatus import progress_line
from trainer.contract.textlines import TrainedClock, clock_text, fit_lines, fit_progress_line, seconds_text

__all__ = ["PLAIN_PROGRESS_EVERY_S", "PLAIN_PROGRESS_PARTS", "STARTUP_BEGINS", "TrainProgress", "eta_seconds"]

PLAIN_PROGRESS_EVERY_S = 10.0
"""Off a TTY (or with --quiet), a plain progress line this often (s), besides the log lines."""

PLAIN_PROGRESS_PARTS = 10
"""Off a TTY (or with --quiet), also a plain progress line at each 1/this of ``n_steps`` (but the last)."""

STARTUP_BEGINS = "start-up: loading the scene and the model, first steps (not training time)"
"""Off a TTY, the line said when the start-up begins (:meth:`TrainProgress.startup_begins`)."""

def eta_seconds(step: int, train_time_s: float, n_steps: int, time_budget_s: float | None,
                since: tuple[int, float] = (0, 0.0)) -> float | None:
    """Seconds of training left: the steps to ``n_steps`` at the mean step time since ``since``
    (``(step, train_time_s)`` where the rate's count starts, e.g. the end of the start-up; a
    resumed run's ``train_time_s`` includes its earlier training), or the rest of
    ``time_budget_s`` when that comes first; None before a step after ``since`` took time."""
    steps, seconds = step - since[0], train_time_s - since[1]
    if steps <= 0 or seconds <= 0:
        return None
    left = (n_steps - step) * seconds / steps
    if time_budget_s is not None:
        left = min(left, time_budget_s - train_time_s)
    return max(0.0, left)


class TrainProgress:
    """The console display of one process's training and final evaluation.

    On a TTY (and without ``quiet``) a rich live line (:func:`~trainer.contract.textlines.fit_progress_line` at the terminal's
    width) advanced after every step, and during the evaluation after every chunk of rays; off a
    TTY plain lines: each log record (with the step count and the ETA), a ``progress:`` line every
    :data:`PLAIN_PROGRESS_EVERY_S` seconds and at each :data:`PLAIN_PROGRESS_PARTS`-th of the
    steps, and during the evaluation an ``evaluating:`` line every
    :data:`PLAIN_PROGRESS_EVERY_S` seconds.

    Args:
        total: ``training.n_steps``.
        quiet: plain lines even on a TTY.
        time_budget_s: ``training.time_budget_s`` (the ETA counts it).
        console: a rich console to draw the live line on (default: stdout's, when it is a TTY).
    """

    def __init__(self, total: int | None, quiet: bool, time_budget_s: float | None = None,
                 console: Any = None) -> None:
        self.plain = quiet or (console is None and not sys.stdout.isatty())
        self.total = total
        self.time_budget_s = time_budget_s
        self._last_plain = time.perf_counter()
        self._clock = TrainedClock()  # the seconds trained once training runs (the budget's clock), else since the start
        self._live = None
        self._rate_from: tuple[int, float] | None = None  # (step, train_time_s) the ETA's rate counts from
        self._part = 0  # the last PLAIN_PROGRESS_PARTS-th of the steps a plain progress line was printed at
        self._state: dict[str, Any] = {"label": "train", "fraction": 0.0, "kept": [self.steps_text(0), "eta -:--"],
                                       "extras": []}
        if not self.plain:
            from rich.live import Live

            self._live = Live(self, console=console, auto_refresh=console is None, refresh_per_second=4,
                              transient=False)
            self._live.start()

    def __rich__(self) -> Any:
        """The current line at the console's width (rich calls this at each refresh)."""
        from rich.text import Text

        width = self._live.console.width - 1 if self._live is not None else 80
        s = self._state
        return Text(fit_progress_line(width, s["label"], s["fraction"], [*s["kept"], self._clock.text()], s["extras"]))

    @staticmethod
    def figures(record: dict[str, Any]) -> list[str]:
        """A log record's figures, most important first (the live line drops them from the end),
        each value before its unit: loss, PSNR, ``6.10 M samples/s``, ``77.6 k rays/s``. A record
        of start-up steps only (``timed_steps`` 0: compilation, the first occupancy pass) shows
        ``start-up`` for its rates, which measure the start-up and not the training."""
        psnr = record.get("train_psnr_db")
        loss = record.get("loss")
        rates = (["start-up"] if record.get("timed_steps") == 0 else
                 [f"{si_number(record['throughput_samples_per_s'])} samples/s", f"{si_number(record['rays_per_s'])} rays/s"])
        return [f"loss {loss:.4g}" if isinstance(loss, (int, float)) else "loss - (no samples yet)",
                f"psnr {psnr:.2f} dB" if isinstance(psnr, (int, float)) else "psnr -", *rates]

    def steps_text(self, step: int) -> str:
        """``step 101/2000`` (``step 101`` without a total)."""
        return f"step {step}/{self.total}" if self.total else f"step {step}"

    def _reached_part(self, step: int) -> int:
        """How many :data:`PLAIN_PROGRESS_PARTS`-ths of ``total`` ``step`` has reached: never fewer
        than at the last plain line, and unchanged at the last step (its metrics line says it)."""
        if not self.total or step >= self.total:
            return self._part
        return max(self._part, step * PLAIN_PROGRESS_PARTS // self.total)

    def eta(self, step: int, train_time_s: float) -> float | None:
        """Seconds of training left at ``step`` after ``train_time_s`` seconds of training (the
        rate from the first step after the start-up, :func:`eta_seconds`); None before it is known."""
        if self._rate_from is None:
            return None
        return eta_seconds(step, train_time_s, self.total or step, self.time_budget_s, self._rate_from)

    def log(self, record: dict[str, Any]) -> None:
        """A metrics record: off a TTY a plain line that starts as the live line does (step count,
        ETA, time trained: ``step 100/2000  eta 9:30  t=30.0 s  loss ...``; broken before a part
        where it would pass the line width, :func:`trainer.contract.textlines.fit_lines`), else
        its figures on the live line."""
        if self.plain:
            eta = self.eta(int(record["step"]), float(record["wall_time_s"]))
            parts = [self.steps_text(record["step"]), f"eta {clock_text(eta)}", f"t={record['wall_time_s']:.1f} s",
                     *self.figures(record)]
            print("\n".join(fit_lines(parts, separator="  ")), flush=True)
            # this line says how far the run is: no progress line for this step nor for its part
            self._last_plain, self._part = time.perf_counter(), self._reached_part(int(record["step"]))
        else:
            self._state["extras"] = self.figures(record)

    def step(self, step: int, train_time_s: float, started: bool = True) -> None:
        """After every training step: advance the line (plain: a ``progress:`` line when the
        interval has passed or the step reached the next :data:`PLAIN_PROGRESS_PARTS`-th of
        ``total``, before the last step). ``started``: the start-up steps are over; the ETA counts
        the rate from the first step seen after them (module docstring)."""
        if not started:
            self._rate_from = None
        elif self._rate_from is None:
            self._rate_from = (step, train_time_s)
        eta = self.eta(step, train_time_s)
        if not self.plain:
            fraction = step / max(self.total or step, 1)
            if self.time_budget_s:  # the bar fills by whichever ends the run first
                fraction = max(fraction, min(train_time_s / self.time_budget_s, 1.0))
            self._clock.report(train_time_s if started else None)
            if started or self._state["label"] != "start-up":  # the start-up's words stay until it ends
                self._state.update(fraction=fraction, kept=[self.steps_text(step), f"eta {clock_text(eta)}"],
                                   label="train")
            return
        now = time.perf_counter()
        part = self._reached_part(step)
        if now - self._last_plain >= PLAIN_PROGRESS_EVERY_S or part > self._part:
            self._last_plain, self._part = now, part
            print(progress_line(step, self.total or step, train_time_s, clock_text(eta)), flush=True)

    def startup_begins(self) -> None:
        """The start-up begins (the scene loaded, the model built, its first steps run: none of it
        training time, :mod:`trainer.train.startup`): off a TTY the line :data:`STARTUP_BEGINS`,
        so that a long start-up does not pass without a word; its end is said with its seconds
        (:meth:`trainer.train.startup.StartupReport.line`). On a TTY the live line reads
        ``start-up`` and ``not training time`` with its clock running until the first training step."""
        if self.plain:
            print("\n".join(fit_lines([STARTUP_BEGINS])), flush=True)
        else:
            self._state.update(label="start-up", kept=["first steps", "not training time"])

    def start_evaluation(self) -> None:
        """The evaluation begins: the live line (or the plain lines) count its rays from here."""
        self._eval_started = self._last_plain = time.perf_counter()
        if self._live is not None:
            self._clock.restart()
            self._state = {"label": "evaluate", "fraction": 0.0, "kept": ["0 rays", "eta -:--"], "extras": []}

    def evaluation_rays(self, done: int, total: int) -> None:
        """``done`` of the evaluation's ``total`` rays (× spp) are rendered."""
        now = time.perf_counter()
        elapsed = now - self._eval_started
        eta = elapsed * (total - done) / done if done else None
        if not self.plain:
            self._state.update(fraction=done / max(total, 1), kept=[f"{si_count(done)}/{si_count(total)} rays",
                                                                     f"eta {clock_text(eta)}"])
            return
        if now - self._last_plain >= PLAIN_PROGRESS_EVERY_S and done < total:
            self._last_plain = now
            print(f"evaluating: {100 * done / max(total, 1):.0f} % of the rays ({si_count(done)} of "
                  f"{si_count(total)}) in {seconds_text(elapsed)}, eta {clock_text(eta)}", flush=True)

    def refresh(self) -> None:
        """Redraw the live line now (it also redraws by itself four times a second)."""
        if self._live is not None:
            self._live.refresh()

    def message(self, text: str) -> None:
        """A line above the live one (or a plain line)."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

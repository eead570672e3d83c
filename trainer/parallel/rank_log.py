"""Live progress of a distributed run on the launcher's console: following rank 0's log.

The ranks' output goes to ``RUN_DIR/logs/rank<R>.log`` (:mod:`trainer.parallel.launch`). Rank 0
writes there what a single-process run prints off a TTY: a ``step N/T  eta M:SS  ...`` line per
``training.log_every`` steps, a ``progress: step N/T ..., eta M:SS`` line every
:data:`trainer.run.progress.PLAIN_PROGRESS_EVERY_S` seconds and at each tenth of the steps, the
resume and evaluation messages.
:class:`RankLogFollower` reads that log while the ranks run (a thread polling the file every
``poll_s``) and repeats those lines on the launcher's stdout as ``rank 0: <line>``: plain lines off
a TTY (rank 0's own cadence), on a TTY one live line as a single-process run draws it
(:func:`trainer.contract.textlines.fit_progress_line`: ``train (rank 0)``, a bar, the step count, rank 0's
last ETA and the time elapsed, then loss and PSNR as they fit), advanced to each step rank 0
reports, the other lines printed above it. The launcher tells rank 0 that prefix
(:data:`trainer.contract.textlines.CONSOLE_PREFIX_ENV`), so that its lines, prefixed, still fit
80 columns.

Each new attempt's header line (``=== rank 0/W ... attempt A pid P: ...``, written by the worker
entry point) becomes ``restart A of K: ...`` when ``A`` > 0: the elastic agent restarted the group
(``--max-restarts``). Warnings go to stderr as they come, each once, as ``warning: ... (rank 0)``
(a scene's skipped frames are said before training starts); a warning rank 0 fitted into lines
(a ``warning:`` line and those that go on from it, :data:`~trainer.contract.textlines.CONTINUATION`)
is repeated whole, refitted under 80 columns. Left out:
that header, ``error:`` lines and tracebacks (the launcher reports the failed rank itself), and
rank 0's closing summary and JSON lines (the launcher prints its own).

Stdlib (and rich, on a TTY) only.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from trainer.contract.runstatus import ERROR_PREFIX, PROGRESS_PREFIX, SUMMARY_PREFIX, WARNING_PREFIX, strip_rank_prefix
from trainer.contract.textlines import CONTINUATION, TrainedClock, clock_text, fit_lines, fit_progress_line, joined

__all__ = ["ATTEMPT_HEADER", "BAR_LABEL", "EVAL_BAR_LABEL", "RANK0_PREFIX", "RankLogFollower", "STARTUP_BAR_LABEL",
           "reported_step", "restart_line"]

RANK0_PREFIX = "rank 0: "
"""What the follower puts before each of rank 0's lines on the launcher's console (rank 0 learns
it through :data:`trainer.contract.textlines.CONSOLE_PREFIX_ENV` and wraps its lines shorter)."""

ATTEMPT_HEADER = re.compile(r"^=== rank (\d+)/(\d+) local rank \d+ attempt (\d+) pid \d+:")
"""The first line of each attempt in a rank's log: groups rank, world size, attempt."""

_STEP_LINE = re.compile(r"^(?:progress: )?step (\d+)\b")
_ETA = re.compile(r"\beta (\S+?),?(?:\s|$)")
_FIGURES = (re.compile(r"\b(loss \S+)"), re.compile(r"\b(psnr \S+ dB)"))
_TRAINED = re.compile(r"(?:\bt=(\d+(?:\.\d+)?) s\b|\b(\d+(?:\.\d+)?) s trained\b)")  # metrics / progress lines

_EVAL_NOTICE = re.compile(r"^evaluating \d+ ")  # the line before the final evaluation: "evaluating 7 test views (..."
_EVAL_RAYS = re.compile(r"^evaluating: (\d+) % of the rays\b.* in (\d+(?:\.\d+)?) (ms|s), eta (\S+)")
_EVAL_VIEWS = re.compile(r"^\s*evaluated (\d+)/(\d+) views in (\d+(?:\.\d+)?) (ms|s)\b")

BAR_LABEL = "train (rank 0)"
STARTUP_BAR_LABEL = "start-up (rank 0)"
"""The live line's label from rank 0's ``start-up: ...`` line (the start-up begins) to its first
step or its ``start-up N s ...`` line (the start-up's end)."""
_STARTUP_BEGINS = re.compile(r"^start-up: ")
_STARTUP_ENDS = re.compile(r"^start-up \d")


def _said_seconds(number: str, unit: str) -> float:
    """Seconds of a duration as :func:`~trainer.contract.textlines.seconds_text` writes it (``ms`` or ``s``)."""
    return float(number) / (1e3 if unit == "ms" else 1.0)
EVAL_BAR_LABEL = "evaluate (rank 0)"


def reported_step(line: str) -> int | None:
    """The step a rank's progress line reports (``step 40/200  eta 0:48  ...`` or ``progress: step
    40/200 ...``), else None."""
    m = _STEP_LINE.match(line)
    return int(m.group(1)) if m else None


def restart_line(attempt: int, max_restarts: int) -> str:
    """What the console says when attempt ``attempt`` (>= 1) of the worker group starts."""
    return (f"restart {attempt} of {max_restarts}: a rank failed; the launcher started the ranks again "
            f"(--max-restarts {max_restarts}); they resume from the newest complete checkpoint")


class RankLogFollower:
    """Repeat a rank's progress lines from its log file on the console while the ranks run.

    Use as a context manager around the launch; on exit the rest of the log is read once more
    (the lines written just before the job ended), then the thread stops.

    Args:
        log_path: the rank's log (``RunDir.log_path(0)``); it may not exist yet.
        total_steps: ``training.n_steps`` (the bar's total).
        max_restarts: ``--max-restarts`` (named in the restart line).
        plain: plain lines (True: off a TTY or ``--quiet``); else a rich progress bar.
        poll_s: seconds between reads of the file.
        out: where plain lines go (default ``sys.stdout``).
        err: where warnings go (default: ``sys.stderr`` as it is when one is said, so that on a
            terminal rich's live display puts it above the bar, not into it).
    """

    def __init__(self, log_path: Path, total_steps: int | None, max_restarts: int, *, plain: bool,
                 poll_s: float = 0.25, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.log_path = Path(log_path)
        self.total_steps = total_steps
        self.max_restarts = max_restarts
        self.plain = plain
        self.poll_s = poll_s
        self.out = out if out is not None else sys.stdout
        self.err = err  # None: sys.stderr when a warning is said (rich's stand-in above the live bar)
        self.warnings_seen: set[str] = set()
        self.restarts_seen = 0
        self._offset = 0
        self._partial = ""
        self._in_traceback = False
        self._in_summary = False
        self._warning: list[str] = []  # the lines of a warning being read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = None
        self._step = 0
        self._eta = "-:--"
        self._clock = TrainedClock()  # rank 0's seconds trained from its last step line, else since the launch
        self._evaluated: tuple[float, str] | None = None  # the final evaluation's share done and how rank 0 said it
        self._figures: dict[int, str] = {}  # loss, PSNR: rank 0's last values
        self._starting = False  # rank 0 said its start-up began and has not ended it

    def __enter__(self) -> "RankLogFollower":
        if not self.plain:
            from rich.live import Live

            self._live = Live(self, refresh_per_second=4, transient=False)
            self._live.start()
        self._thread = threading.Thread(target=self._run, name="rank0-log-follower", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()  # what the rank wrote just before the end
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        self._say_warning()
        if self._live is not None:
            self._live.stop()

    def bar_line(self, width: int) -> str:
        """The live line at ``width`` columns: ``train (rank 0)``, the bar, ``step N/T``, rank 0's
        last ``eta M:SS``, the seconds trained (once rank 0 has said them; the time since the
        launch before), then loss and PSNR as they fit; during rank 0's start-up
        (:data:`STARTUP_BAR_LABEL`) ``first steps``, ``not training time`` and the time since the
        launch. Once rank 0 announces its final
        evaluation: ``evaluate (rank 0)``, the share of its rays, its ``eta`` and the seconds it
        has taken."""
        if self._evaluated is not None:
            fraction, done = self._evaluated
            return fit_progress_line(width, EVAL_BAR_LABEL, fraction, [done, f"eta {self._eta}", self._clock.text()], [])
        if self._starting:
            return fit_progress_line(width, STARTUP_BAR_LABEL, 0.0, ["first steps", "not training time",
                                                                      self._clock.text()], [])
        total = self.total_steps
        steps = f"step {self._step}/{total}" if total else f"step {self._step}"
        elapsed = self._clock.text()
        extras = [self._figures[k] for k in sorted(self._figures)]
        return fit_progress_line(width, BAR_LABEL, self._step / max(total or self._step, 1),
                                 [steps, f"eta {self._eta}", elapsed], extras)

    def __rich__(self) -> Any:
        """The live line at the console's width (rich calls this at each refresh)."""
        from rich.text import Text

        width = self._live.console.width - 1 if self._live is not None else 80
        return Text(self.bar_line(width))

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        """Read what the log gained since the last read and emit its lines (a log that shrank,
        i.e. was truncated, is read from its start)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                if size < self._offset:
                    self._offset, self._partial = 0, ""
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", errors="replace")
        *lines, self._partial = text.split("\n")
        for line in lines:
            self._line(line.rstrip("\r"))
        if not self._partial:  # a warning is written at once: read up to a line's end, it is whole
            self._say_warning()

    def _say_warning(self) -> None:
        """The warning read so far, on stderr unless said before: one line as it came, or the
        lines of one the rank fitted, joined and refitted with the mark."""
        if not self._warning:
            return
        lines, self._warning = self._warning, []
        statement = joined(lines)
        if statement in self.warnings_seen:
            return
        self.warnings_seen.add(statement)
        said = [f"{statement} (rank 0)"] if len(lines) == 1 else fit_lines([statement, "(rank 0)"])
        print("\n".join(said), file=self.err if self.err is not None else sys.stderr, flush=True)

    def _line(self, raw: str) -> None:
        line = strip_rank_prefix(raw).rstrip()
        header = ATTEMPT_HEADER.match(line)
        if header:
            self._in_traceback = False
            attempt = int(header.group(3))
            if attempt > 0:
                self.restarts_seen = max(self.restarts_seen, attempt)
                self._emit(restart_line(attempt, self.max_restarts))
            return
        if line.startswith("Traceback (most recent call last)"):
            self._in_traceback = True
        if self._warning:
            if line.startswith(CONTINUATION) and line.strip():
                self._warning.append(line)
                return
            self._say_warning()
        if line.startswith(WARNING_PREFIX) and not self._in_traceback:
            self._warning = [line]
            return
        if line.startswith(SUMMARY_PREFIX) or (self._in_summary and line.startswith(CONTINUATION)):
            self._in_summary = True  # rank 0's summary lines: the launcher prints its own
            return
        self._in_summary = False
        if (self._in_traceback or not line.strip() or line.startswith(ERROR_PREFIX)
                or line.startswith("{") and line.endswith("}")):
            return
        begins = _STARTUP_BEGINS.match(line) is not None
        if begins or _STARTUP_ENDS.match(line):
            self._starting = begins
        if _EVAL_NOTICE.match(line):  # the final evaluation begins: the live line counts its rays from here
            self._evaluated, self._eta = (0.0, "0 % of the rays"), "-:--"
            self._clock.restart()
        rays, views = _EVAL_RAYS.match(line), _EVAL_VIEWS.match(line)
        if rays:
            self._evaluated, self._eta = (int(rays.group(1)) / 100, f"{rays.group(1)} % of the rays"), rays.group(4)
            self._clock.report(_said_seconds(rays.group(2), rays.group(3)))
            if self._live is not None:
                return  # the live line shows it
        elif views and self._evaluated is not None:
            done, total = int(views.group(1)), int(views.group(2))
            seconds = _said_seconds(views.group(3), views.group(4))
            self._evaluated = (done / max(total, 1), f"{done}/{total} views")
            self._eta = clock_text(seconds * (total - done) / done) if done else "-:--"  # the views so far, at their pace
            self._clock.report(seconds)
        step = reported_step(line)
        if step is not None:
            self._step, self._starting = step, False
            eta = _ETA.search(line)
            if eta:
                self._eta = eta.group(1)
            trained = _TRAINED.search(line)
            if trained:
                self._clock.report(float(trained.group(1) or trained.group(2)))
        for k, pattern in enumerate(_FIGURES):
            figure = pattern.search(line)
            if figure:
                self._figures[k] = figure.group(1)
        if step is not None and self._live is not None and line.startswith(PROGRESS_PREFIX):
            return  # the live line shows it
        self._emit(f"{RANK0_PREFIX}{line}")

    def _emit(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.out, flush=True)


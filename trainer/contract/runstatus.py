"""How a run tells the driver how it ended: the ``status.json`` keys and states, and the one-line
``error: `` protocol of the trainer's and the launcher's stderr.

The trainer (:mod:`trainer.cli`) and its launcher (:mod:`trainer.parallel.launch`) write them;
``ngptune profile`` and the sweep's trials read them. Nothing else spells these keys.

``status.json`` (:attr:`trainer.contract.rundir.RunDir.status_path`) is one JSON object, rewritten
atomically at the start and at the end of a run::

    state                 running | completed | failed | interrupted | diverged   (STATE_KEY, STATES)
    reason                failed / interrupted / diverged: one line ("ExcType: message", or the
                          launcher's message naming the failed rank)    (REASON_KEY)
    diverged_step, nonfinite_tensor   a diverged run: the step at which a NaN or infinite loss or
                          parameter was found, and the first such tensor ("loss" or a parameter
                          name); its ``snapshot`` (if any) is the last finite one
    run_dir, scene, world_size, step, train_time_s, wall_s, checkpoint, snapshot, resumed_from,
    resumed_from_step, throughput_samples_per_s, eval_psnr_db, eval_ssim, eval_split, stopped_by
    wall_s                this process's seconds from the scene's loading to the run's end: start-up,
                          training and the final evaluation (>= startup_s + train_time_s for a fresh
                          run; a resumed run's train_time_s counts the training before it too)
    startup_s, kernels_compiled, step_kind   start-up before the training clock (trainer.train.startup):
                          seconds, Triton kernels compiled (0: all from the cache), the training step
    skipped_frames        frames of the scene left out for their missing image files (only when
                          some were; SKIPPED_FRAMES_KEY): a command that reloads the run's scene
                          repeats the loader's warning only when it skips another number
    derived_settings      dotted key → the value the run chose for each setting of
                          trainer.contract.config.DERIVED_SETTINGS its config leaves null
                          (DERIVED_KEY; written once the trainer is built: the scene's box, the
                          hash grid's F and T, the cone angle, ...; derived_settings_of reads it)
    train_start_unix_s    wall clock (``time.time()``, s) at which the training loop started
                          (TRAIN_START_KEY; the profile's GPU timeline counts from it)
    failed_rank, failed_log   a failed distributed job: the root-cause rank and its log (launcher)
    restart_count         a distributed run: times the elastic agent restarted the worker group
                          before this attempt (``--max-restarts``; RESTART_COUNT_KEY); with
                          resumed_from / resumed_from_step naming the checkpoint it resumed from
    pid, host             the process that writes the file and its host (PID_KEY, HOST_KEY): a
                          ``running`` state whose process is gone from this host is stale
                          (:func:`state_text`: a run killed by SIGKILL or a power cut)

While it trains, a run off a TTY (or ``--quiet``) prints how far it is every few seconds as a
line :func:`progress_line` writes and :func:`read_progress_line` reads back (``progress: step
40/200 (20 %), 12.3 s trained, eta 0:48``; the launcher repeats rank 0's as ``rank 0: progress:
...``): the driver shows the progress of the runs it started from their output.

A process of the trainer, the launcher or ``ngptune`` that refuses its input or fails prints ONE
line ``error: <message>`` on stderr (:func:`print_error`) and exits with status 2 (1 for a failed
profile); :func:`last_error_message` reads it back from a captured output or a rank's log. Their
own warnings are lines ``warning: <message>`` (:func:`plain_warning_format`); a long one goes on
in lines that start with :data:`~trainer.contract.textlines.CONTINUATION` (:func:`fitted_warning`);
the launcher repeats rank 0's on its own stderr.

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.contract.metrics import quantity_text
from trainer.contract.textlines import CONTINUATION, estimate_text, fit_lines, listed

STATE_KEY = "state"
REASON_KEY = "reason"
RUN_DIR_KEY = "run_dir"
SKIPPED_FRAMES_KEY = "skipped_frames"
FAILED_RANK_KEY = "failed_rank"
FAILED_LOG_KEY = "failed_log"
RESTART_COUNT_KEY = "restart_count"
DIVERGED_STEP_KEY = "diverged_step"
NONFINITE_TENSOR_KEY = "nonfinite_tensor"
PID_KEY = "pid"
HOST_KEY = "host"
TRAIN_START_KEY = "train_start_unix_s"
"""``status.json`` key: wall clock (``time.time()``, s) at which the training loop started; the
profile's GPU timeline counts from it."""

DERIVED_KEY = "derived_settings"
"""``status.json`` key: dotted key → the value the run chose for a setting of
:data:`trainer.contract.config.DERIVED_SETTINGS` that its config leaves null."""

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
INTERRUPTED = "interrupted"
DIVERGED = "diverged"
STATES = (RUNNING, COMPLETED, FAILED, INTERRUPTED, DIVERGED)
"""Values of ``status.json``'s ``state``."""

ERROR_PREFIX = "error: "
"""Start of the one line a failing process prints on stderr."""

WARNING_PREFIX = "warning: "
"""Start of the line each of the trainer's (and the driver's) own warnings prints (:func:`plain_warning_format`)."""

# torch.distributed's prefix on lines a rank prints after joining a group.
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


PROGRESS_PREFIX = "progress: "
"""Start of the line that says how far a training run is (:func:`progress_line`)."""

_PROGRESS_LINE = re.compile(r"^(?:rank \d+: )?progress: step (\d+)/(\d+) \([0-9]+ %\), ([0-9]+(?:\.[0-9]+)?) s trained\b")


def progress_line(step: int, total: int, train_time_s: float, eta: str) -> str:
    """``progress: step 40/200 (20 %), 12.3 s trained, eta 0:48``: ``step`` of ``total`` steps done
    after ``train_time_s`` seconds of training (s), the time left as ``eta`` text."""
    return (f"{PROGRESS_PREFIX}step {step}/{total} ({100 * step / max(total, 1):.0f} %), "
            f"{train_time_s:.1f} s trained, eta {eta}")


def read_progress_line(line: str) -> tuple[int, int, float] | None:
    """``(step, total, train_time_s)`` of a :func:`progress_line` (also as the launcher repeats it,
    after ``rank R: ``), else None.

    >>> read_progress_line("rank 0: progress: step 40/200 (20 %), 12.3 s trained, eta 0:48")
    (40, 200, 12.3)
    """
    m = _PROGRESS_LINE.match(strip_rank_prefix(line.strip()))
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


SUMMARY_PREFIX = "trained to step "
"""Start of :func:`summary_lines` for a run that trained (the launcher's follower leaves rank 0's
copy of them out: the launcher prints its own)."""


def summary_lines(status: Mapping[str, Any]) -> list[str]:
    """Readable lines from a finished run's ``status.json``: steps and training time, what
    stopped it early, restarts, throughput, the evaluation, where the model is; each under 80
    columns (:func:`trainer.contract.textlines.fit_lines`: the first starts with
    :data:`SUMMARY_PREFIX`, the others with two spaces); ``[]`` when there is nothing to say.
    Printed before the JSON line that ends a run's output."""
    parts = []
    if isinstance(status.get("step"), int):
        took = status.get("train_time_s")
        parts.append(f"{SUMMARY_PREFIX}{status['step']}" + (f" in {took:.1f} s" if isinstance(took, (int, float)) else ""))
        if status.get("stopped_by") == "time_budget":
            parts[-1] += " (the time budget stopped it)"  # how: the stop line before says
    restarts = status.get(RESTART_COUNT_KEY)
    if isinstance(restarts, int) and restarts > 0:
        resumed = status.get("resumed_from")
        at = f" at step {status['resumed_from_step']}" if isinstance(status.get("resumed_from_step"), int) else ""
        parts.append(f"after {restarts} restart{'s' if restarts != 1 else ''}"
                     + (f" (resumed from {resumed}{at})" if resumed else " (from the start: no checkpoint)"))
    if isinstance(status.get("throughput_samples_per_s"), (int, float)):
        parts.append(quantity_text("throughput_samples_per_s", status["throughput_samples_per_s"]))
    if isinstance(status.get("eval_psnr_db"), (int, float)):
        took = status.get("eval_time_s")
        parts.append(f"evaluation on {status.get('eval_split', 'test')}: PSNR {status['eval_psnr_db']:.2f} dB"
                     + (f", SSIM {status['eval_ssim']:.3f}" if isinstance(status.get("eval_ssim"), (int, float)) else "")
                     + (f" ({estimate_text(took)})" if isinstance(took, (int, float)) else ""))  # as its own line
    model = status.get("snapshot") or status.get("checkpoint")
    if parts and isinstance(model, str):
        parts.append(f"model: {model}")
    return fit_lines(listed(parts))


def result_line(status: Mapping[str, Any], **extra: Any) -> str:
    """The JSON line that ends a run's output: the fields of its ``status.json`` (the scene left
    out: the first line names it) and ``extra`` (a launcher's ``nproc_per_node``). One process and a
    launched job end with the same keys: ``state``, ``step``, ``train_time_s``, the throughput, the
    evaluation, the model, ``run_dir``. Strict JSON, as ``status.json``: a NaN or an infinity is
    ``null`` with its reason (:func:`~trainer.contract.rundir.json_ready`)."""
    import json

    from trainer.contract.rundir import json_ready

    fields = {**{k: v for k, v in status.items() if k != "scene"}, **extra}
    return json.dumps(json_ready(fields), default=str, allow_nan=False)


def failed_fields(reason: str, *, failed_rank: int | None = None, failed_log: str | None = None) -> dict[str, Any]:
    """``status.json`` fields of a failed run (with the root-cause rank and its log, when known)."""
    fields: dict[str, Any] = {STATE_KEY: FAILED, REASON_KEY: reason}
    if failed_rank is not None:
        fields[FAILED_RANK_KEY] = failed_rank
    if failed_log is not None:
        fields[FAILED_LOG_KEY] = failed_log
    return fields


def diverged_fields(reason: str, step: int, tensor: str) -> dict[str, Any]:
    """``status.json`` fields of a run stopped because its loss or a parameter became NaN or infinite."""
    return {STATE_KEY: DIVERGED, REASON_KEY: reason, DIVERGED_STEP_KEY: step, NONFINITE_TENSOR_KEY: tensor}


def derived_settings_of(status: Mapping[str, Any] | None) -> dict[str, int | float]:
    """The values a run chose for the settings its config leaves null (``status``'s
    :data:`DERIVED_KEY`: dotted key → number), or ``{}`` when it records none (no ``status.json``, a
    run that stopped before its trainer was built, or one of an older trainer); an entry that is
    not a number is left out.

    >>> derived_settings_of({"derived_settings": {"training.cone_angle": 0.0, "data.aabb_scale": 4}})
    {'training.cone_angle': 0.0, 'data.aabb_scale': 4}
    """
    recorded = (status or {}).get(DERIVED_KEY)
    if not isinstance(recorded, Mapping):
        return {}
    return {str(key): value for key, value in recorded.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def is_diverged(status: Mapping[str, Any] | None) -> bool:
    """Whether a read ``status.json`` says the run diverged."""
    return state_of(status) == DIVERGED


def interrupted_fields(reason: str) -> dict[str, Any]:
    """``status.json`` fields of a run stopped by Ctrl-C or SIGTERM."""
    return {STATE_KEY: INTERRUPTED, REASON_KEY: reason}


def state_of(status: Mapping[str, Any] | None) -> str | None:
    """The ``state`` of a read ``status.json`` (None when there is none)."""
    return None if status is None else status.get(STATE_KEY)


def process_fields() -> dict[str, Any]:
    """``status.json`` fields naming the process that writes it: ``pid`` and ``host``."""
    import os
    import socket

    return {PID_KEY: os.getpid(), HOST_KEY: socket.gethostname()}


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host (a zombie, killed and not yet reaped, counts
    as gone)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's process
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


def stale_pid(status: Mapping[str, Any] | None) -> int | None:
    """The recorded pid of a ``running`` status whose process no longer exists on this host (the
    run was killed without a chance to write its end), else None (another host's process, or no
    pid recorded, cannot be told)."""
    import socket

    if state_of(status) != RUNNING:
        return None
    pid = status.get(PID_KEY)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    if status.get(HOST_KEY) not in (None, socket.gethostname()):
        return None
    return pid if process_gone(pid) else None


def state_text(status: Mapping[str, Any] | None) -> str:
    """The state of a read ``status.json`` for a person: its ``state``, or ``stale: process PID
    no longer exists`` for a ``running`` run whose process is gone (:func:`stale_pid`);
    ``unknown`` without a state. Never a bracket: the commands show it inside theirs (``--out
    runs/x: already holds a run (its status.json says 'stale: process 123 no longer exists')``)."""
    pid = stale_pid(status)
    if pid is not None:
        return f"stale: process {pid} no longer exists"
    return str((status or {}).get(STATE_KEY, "unknown"))


def is_completed(status: Mapping[str, Any] | None) -> bool:
    """Whether a read ``status.json`` says the run completed."""
    return state_of(status) == COMPLETED


def one_line(text: object) -> str:
    """``text`` on one line: line breaks (a file name or a value holding one) written as the
    escapes ``\\n`` / ``\\r``, so one message never reads as several."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


def error_line(message: object) -> str:
    """``error: <message>``: the one line a failing process prints on stderr (:func:`one_line`)."""
    return f"{ERROR_PREFIX}{one_line(message)}"


def fitted_error_lines(message: object) -> list[str]:
    """:func:`error_line` of ``message`` broken at its spaces into lines under 80 columns
    (:func:`~trainer.contract.textlines.fit_lines`: the lines after the first start with
    :data:`~trainer.contract.textlines.CONTINUATION`, a path stays whole), for a person at a
    terminal; :func:`~trainer.contract.textlines.joined` gives back the one line. An error with
    remedies (:class:`~trainer.contract.errors.TrainerError`'s ``remedies``) reads ``error:
    <problem>``, then each remedy on a line of its own after
    :data:`~trainer.contract.textlines.CONTINUATION` (going on after four spaces where it is
    longer than a line): render, export and view say it alike, and :func:`last_error_message`
    reads back the problem. A process whose output another reads for its ``error:`` line (a rank)
    prints :func:`error_line` instead."""
    remedies = getattr(message, "remedies", ())
    if not remedies:
        return fit_lines([error_line(message)])
    lines = fit_lines([error_line(getattr(message, "problem", message))])
    for remedy in remedies:
        lines += fit_lines([CONTINUATION + one_line(remedy)], indent=CONTINUATION * 2)
    return lines


def print_error(message: object) -> None:
    """Print ``message`` as an error on stderr: :func:`fitted_error_lines` for a person at a
    terminal, else :func:`error_line` (one line, for whatever reads the output; a rank of a job
    always prints one line, which its launcher reads)."""
    rank = any(key in os.environ for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK"))
    if not rank and sys.stderr.isatty():
        print("\n".join(fitted_error_lines(message)), file=sys.stderr)
    else:
        print(error_line(message), file=sys.stderr)


def strip_rank_prefix(line: str) -> str:
    """``line`` without torch.distributed's ``[rank<R>]:`` prefix."""
    return _RANK_PREFIX.sub("", line)


def last_error_message(text: str) -> str | None:
    """The message of the last ``error: `` line of ``text`` (a process's output or a rank's log;
    surrounding blanks and a ``[rank<R>]:`` prefix are ignored), or None when it has none."""
    for line in reversed(text.splitlines()):
        stripped = strip_rank_prefix(line).strip()
        if stripped.startswith(ERROR_PREFIX):
            return stripped[len(ERROR_PREFIX):]
    return None


def error_or_last_line(text: str) -> str:
    """:func:`last_error_message` of ``text``, else its last non-empty line (an error that is no
    ``error: `` line, e.g. a traceback's last line), else ""."""
    message = last_error_message(text)
    if message is not None:
        return message
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


TRAINER_ROOT = Path(__file__).resolve().parents[1]
"""The folder of the ``trainer`` package (whose UserWarnings :func:`plain_warning_format` shortens)."""


def fitted_warning(text: str) -> str:
    """``text`` as the message of a warning whose printed form, ``warning: <message>``
    (:func:`plain_warning_format`), is broken at its spaces into lines under 80 columns
    (:func:`~trainer.contract.textlines.fit_lines`: the lines after the first start with
    :data:`~trainer.contract.textlines.CONTINUATION`, a path stays whole);
    :func:`~trainer.contract.textlines.joined` gives back ``text`` with single spaces."""
    lines = fit_lines([WARNING_PREFIX + text])
    if len(lines) > 1 and lines[0] == WARNING_PREFIX.rstrip():  # a first word too long for any line
        lines[:2] = [WARNING_PREFIX + lines[1].lstrip()]  # stays beside the prefix, whole
    return "\n".join(lines)[len(WARNING_PREFIX):]


def plain_warning_format(*roots: Path) -> None:
    """Print the UserWarnings raised by code under :data:`TRAINER_ROOT` (and under each of
    ``roots``: the driver adds its own package) as ``warning: <message>`` (no source file and
    line, which mean nothing to a user); other warnings keep Python's format. Only the printed
    format changes (``warnings.formatwarning``), so recording warnings (tests) is unaffected."""
    original = getattr(warnings.formatwarning, "python_format", warnings.formatwarning)
    prefixes = tuple(str(Path(root)) for root in (TRAINER_ROOT, *roots))

    def formatwarning(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
        if str(filename).startswith(prefixes) and issubclass(category, UserWarning):
            return f"{WARNING_PREFIX}{message}\n"
        return original(message, category, filename, lineno, line)

    formatwarning.python_format = original  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning

"""The loop of :meth:`trainer.train.loop.Trainer.train`: steps until a step count or a time budget.

Each iteration runs one step of the trainer's :class:`~trainer.train.step.Step` and keeps the
clocks: the first steps are start-up (:mod:`trainer.train.startup`; their seconds are not training
time), every ``training.log_every`` steps the device is synchronised and an interval record written
(:mod:`trainer.train.records`), a periodic evaluation (every ``eval_every`` steps, and at the
checks that reach the ``training.eval_at_s`` marks: :mod:`trainer.train.time_marks`) runs outside
the training clock, a periodic snapshot is written, and the time budget looks one step ahead
(:mod:`trainer.train.budget`) so no step is started that is expected to end past it. Only the
steps' own seconds count as training.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable

from trainer.contract.errors import TrainingError
from trainer.contract.runstatus import fitted_warning
from trainer.train.divergence import diverged_instead
from trainer.train.faults import inject_step_faults
from trainer.train.records import IntervalRecords
from trainer.train.time_marks import TimeMarks

__all__ = ["TrainingLoop"]


class TrainingLoop:
    """One call of :meth:`~trainer.train.loop.Trainer.train` on ``trainer`` (a
    :class:`~trainer.train.loop.Trainer` or a distributed trainer): it advances ``trainer.step``
    and ``trainer.train_time_s`` and sets ``trainer.startup`` once the start-up steps are done."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def run(self, n_steps: int | None, time_budget_s: float | None, *,
            on_log: Callable[[dict[str, Any]], None] | None = None,
            on_eval: Callable[[dict[str, Any]], None] | None = None,
            snapshot_every: int = 0, eval_every: int = 0,
            on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
        """Train as :meth:`~trainer.train.loop.Trainer.train` says (the arguments are its own;
        None takes ``training.n_steps`` / ``training.time_budget_s``) and return the last
        metrics record.

        Raises:
            DivergedError: the loss or a parameter is NaN or infinite at a record or a snapshot, or
                it caused a training error (an empty occupancy grid).
            TrainingError: as :meth:`~trainer.train.step.Step.advance`.
        """
        trainer = self.trainer
        t = trainer.cfg.training
        n_steps = t.n_steps if n_steps is None else n_steps
        time_budget_s = t.time_budget_s if time_budget_s is None else time_budget_s
        records = IntervalRecords(trainer, on_log)
        marks = TimeMarks(t.eval_at_s, trainer.train_time_s)
        late = marks.past(time_budget_s)
        if late and trainer.rank == 0:
            warnings.warn(fitted_warning(
                f"training.eval_at_s: {', '.join(f'{m:g}' for m in late)} s at or past the time budget of "
                f"{time_budget_s:g} s: never reached, no evaluation there"), stacklevel=2)
        last_record: dict[str, Any] = {}
        startup_until = None if trainer.startup is not None else trainer.step + trainer.stepper.startup_steps()
        if startup_until is None:
            marks.start(trainer.step)
        try:
            while trainer.step < n_steps:
                if time_budget_s is not None and trainer.time_budget_spent(time_budget_s):
                    break
                inject_step_faults(trainer.cfg.faults, trainer.rank, trainer.step)
                trainer.tracing.at_step(trainer.step)
                t_step = time.perf_counter()
                occupancy_step = trainer.occupancy_refresh.due(trainer.step)
                records.add(*trainer.train_step())
                done = trainer.step >= n_steps
                timed_step = startup_until is None
                if startup_until is not None:  # a start-up step: its seconds are not training
                    if trainer.step >= startup_until or done:
                        self.finish_startup(records, trainer.step - startup_until + trainer.stepper.startup_steps())
                        startup_until = None
                        marks.start(trainer.step)
                    t_step = time.perf_counter()
                eval_now = bool(eval_every) and trainer.step % eval_every == 0 and not done
                log_now = trainer.step % t.log_every == 0 or done
                # every rank checks the marks at the same steps: records, and the steps the agreed pace predicts
                mark_check = marks.pending and timed_step and (log_now or marks.due(trainer.step))
                if log_now or eval_now or mark_check:
                    trainer.synchronize()
                    step_s = time.perf_counter() - t_step
                    trainer.train_time_s += step_s
                    if mark_check:
                        eval_now = marks.reached(trainer.agreed_train_time_s(), trainer.step) or eval_now
                    result = self.evaluate_outside_clock(records, on_eval) if eval_now else None
                    if log_now or eval_now:
                        last_record = records.flush(result)  # its PSNR goes into this step's record
                else:
                    step_s = time.perf_counter() - t_step
                    trainer.train_time_s += step_s
                if timed_step:
                    trainer.step_durations.note(occupancy_step, step_s)
                if trainer.run_dir and snapshot_every and trainer.step % snapshot_every == 0:
                    trainer.periodic_save()
                if on_step:
                    on_step(trainer.step, trainer.train_time_s)
            if records.interval.steps > 0:  # stopped by the time budget between two records
                trainer.synchronize()
                result = None  # a mark the last steps reached is taken before the run ends (every rank here)
                if marks.pending and startup_until is None and marks.reached(trainer.agreed_train_time_s()):
                    result = self.evaluate_outside_clock(records, on_eval)
                last_record = records.flush(result)
        except TrainingError as exc:  # an empty occupancy grid may be a diverged model's doing
            raise diverged_instead(exc, trainer.field, trainer.step) or exc
        finally:
            records.close()
            trainer.tracing.close()  # the run ended inside the window: keep what was recorded
        return last_record

    def finish_startup(self, records: IntervalRecords, steps: int) -> None:
        """The start-up's ``steps`` steps are done: report them (``trainer.startup``, the next
        record) and start the interval's clock; their phase times are not the interval's."""
        trainer = self.trainer
        trainer.synchronize()
        trainer.startup = trainer.startup_clock.report(steps, trainer.step_choice.kind, trainer.step_choice.reason)
        trainer.timer.collect()
        records.restart_clock()
        records.add_once(trainer.startup.record())

    def evaluate_outside_clock(self, records: IntervalRecords,
                               on_eval: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        """``trainer.evaluate`` of ``training.eval_every_max_images`` views during training; its
        seconds are left out of the interval's time. It scores the views and writes no PNGs (each
        1080x1920 PNG costs ~0.1 s; the final evaluation writes the renders)."""
        trainer = self.trainer
        t_eval = time.perf_counter()
        result = trainer.evaluate(max_images=trainer.cfg.training.eval_every_max_images, save_renders=False)
        records.exclude(time.perf_counter() - t_eval)
        if on_eval:
            on_eval(result)
        return result

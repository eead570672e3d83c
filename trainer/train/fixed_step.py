"""The fixed-capacity training step: every shape fixed at start, counts on the device, no host read.

The dynamic step (:mod:`trainer.train.dynamic_step`) draws as many rays as the batch
sizing asks for, reads the march's sample count on the host and sizes every tensor after it.
:class:`FixedCapacityStep` runs the same phases on shapes fixed once:

* ``ray_capacity`` rays are drawn every step; the first ``n_live`` (a device scalar) are the
  step's rays, the rest get NaN origins (a miss for every march) and leave the loss. It starts at
  ``⌈min(max_rays_per_step, target_samples_per_step / 4)⌉₆₄`` (room for 4 kept samples per ray);
* the march writes into ``march_capacity`` slots, starting at ``⌈target_samples_per_step ·
  capacity_headroom⌉₂₅₆`` (:mod:`trainer.render.fixed_march`); rays that do not fit whole are
  left out and their samples counted in the ``samples_clipped`` metric;
* capacities that fit: each step also notes, on the device, the rays the batch sizing wants
  (``target / kept`` per ray) and the marched samples those rays would need; when the interval's
  read (below) finds either above its capacity, the buffers grow to 1.25× the need (rays at most
  ``max_rays_per_step``, samples at most :data:`MAX_HEADROOM` × the target), the captured graph is
  dropped and captured again at the next step, and ``recaptures`` counts it in the metrics;
* the density pass of compaction runs the MLP on the marched samples only (the march's device
  count; :func:`trainer.model.triton_mlp.fused_density`), not on the whole capacity;
* with ``training.compact_samples`` the samples in front of each ray's early stop fill a batch of
  ``⌈target_samples_per_step⌉₂₅₆`` samples (:func:`~trainer.render.compact.compact_samples`),
  else the march buffers are the batch;
* the loss is normalised by ``3 · n_live`` as the dynamic step normalises by its ray count; rays
  left out by a capacity count as exact predictions (no loss, no gradient), as in the dynamic step;
* batch sizing on the device: exponential averages (0.9/0.1, the dynamic rule) of kept and marched
  samples per marched ray, ``n_live = ⌈min(target / kept, march_capacity / marched)⌉₆₄`` clamped to
  [64, ray_capacity] after each step (the dynamic step applies a kept count one step later);
* loss, MSE, rays, samples, skips and clipped samples are summed on the device
  (:mod:`trainer.train.device_metrics`) and read once per logging interval.

The same body runs eagerly (``training.cuda_graphs = off``, the twin, and the CPU) or captured in
a CUDA graph and replayed (:mod:`trainer.train.capture`). What differs from the dynamic step in
outcome: the random draws (``ray_capacity`` pixels per step instead of ``n``), the compacted batch
size (the target instead of ``n · kept per ray``) and the one-step-earlier sizing; the loss curves
agree within noise (``tests/trainer/train/test_fixed_step.py``).

Host reads left: the PyTorch march twin reads its sample count (:mod:`trainer.render.fixed_march`);
an fp16 run with ``optimizer.ema_decay`` reads whether the step overflowed (the weight average
skips such steps; fp16 is not captured), and a non-fused optimiser (the CPU) reads GradScaler's flag as torch does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer.contract.errors import TrainingError
from trainer.contract.metrics import PHASES
from trainer.render.compact import compact_samples, kept_counts
from trainer.render.fixed_march import MarchBuffers, march_fixed
from trainer.render.occupancy import MIN_STEP_SIZE
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE
from trainer.train import optimization
from trainer.train.capture import WARMUP_STEPS
from trainer.train.device_metrics import DeviceIntervalMetrics
from trainer.train.phases import (
    alpha_term, appearance_rgb, density_without_grad, distortion_term, field_outputs, loss_and_mse, render_rgb,
)
from trainer.train.records import Interval
from trainer.train.step import Step, StepOutcome, StepStats

__all__ = ["FixedCapacityStep", "MAX_HEADROOM", "fixed_capacities"]

RAY_GRANULARITY = 64
SAMPLE_GRANULARITY = 256
START_KEPT_PER_RAY = 4  # the first ray capacity leaves room for this many kept samples per ray
MAX_HEADROOM = 16.0  # march capacity grows to at most this multiple of target_samples_per_step
GROWTH = 1.25  # a capacity that grows takes this multiple of the need seen


def _round_up(value: float, granularity: int) -> int:
    return int(math.ceil(value / granularity)) * granularity


def fixed_capacities(target_samples: int, headroom: float, max_rays: int) -> tuple[int, int, int]:
    """``(ray_capacity, march_capacity, train_capacity)`` a fixed-capacity step starts with
    (module docstring)."""
    march_capacity = _round_up(target_samples * headroom, SAMPLE_GRANULARITY)
    train_capacity = _round_up(target_samples, SAMPLE_GRANULARITY)
    rays = min(max_rays, march_capacity, target_samples / START_KEPT_PER_RAY)
    ray_capacity = max(RAY_GRANULARITY, _round_up(rays, RAY_GRANULARITY))
    return ray_capacity, march_capacity, train_capacity


class FixedCapacityStep(Step):
    """One fixed-capacity step of a :class:`~trainer.train.loop.Trainer` (module docstring).

    Args:
        trainer: the trainer whose field, grid, inputs, optimiser, generator and timer the step
            uses (single process).

    Attributes:
        graph: the :class:`~trainer.train.capture.CapturedStep` that replays :meth:`run`, or None
            (eager).
        sample_phases: the next step runs eagerly with the phase timers (``profile.phase_timers``;
            the first step of every logging interval of a captured step).
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        t = trainer.cfg.training
        device = trainer.device
        self.ray_capacity, self.march_capacity, self.train_capacity = fixed_capacities(
            t.target_samples_per_step, t.capacity_headroom, t.max_rays_per_step)
        self.max_rays = max(RAY_GRANULARITY, _round_up(t.max_rays_per_step, RAY_GRANULARITY))
        self.max_march = max(self.march_capacity, _round_up(t.target_samples_per_step * MAX_HEADROOM,
                                                            SAMPLE_GRANULARITY))
        self.target = float(t.target_samples_per_step)
        self.recaptures = 0
        self._allocate(self.ray_capacity, self.march_capacity)
        initial = min(self.ray_capacity, _round_up(t.initial_rays_per_step, RAY_GRANULARITY))
        self.n_live = torch.tensor(initial, dtype=torch.int64, device=device)
        self.kept_per_ray = torch.zeros((), device=device)
        self.marched_per_ray = torch.zeros((), device=device)
        self.has_average = torch.zeros((), dtype=torch.bool, device=device)
        self.metrics = DeviceIntervalMetrics(device)
        self.rule = None
        if trainer.march_backend == "triton":
            from trainer.render.triton_march import march_rule_tensor

            self.rule = march_rule_tensor(MIN_STEP_SIZE, trainer.cone_angle, trainer.max_step_size, device)
        self.graph: Any = None  # a trainer.train.capture.CapturedStep when the step is captured
        self.sample_phases = trainer.cfg.profile.phase_timers

    def _allocate(self, ray_capacity: int, march_capacity: int) -> None:
        """The buffers of these capacities (the captured graph, if any, must be dropped first)."""
        device = self.trainer.device
        self.ray_capacity, self.march_capacity = int(ray_capacity), int(march_capacity)
        self.buffers = MarchBuffers(self.march_capacity, device)
        self.ray_slot = torch.arange(self.ray_capacity, device=device)

    def advance(self) -> StepOutcome:
        """One step: the occupancy update at its cadence, then :meth:`run` eagerly, or the
        captured graph's replay (:attr:`sample_phases`: an eager step with the phase timers, see
        :mod:`trainer.train.capture`). Its counts stay on the device: the stats are zeros."""
        tr = self.trainer
        tr.occupancy_refresh.maybe_update(tr.step, self.density_for_grid, tr.grid_generator)
        if self.graph is None:
            tr.optim.set_learning_rate(tr.step)
            self.run()
        else:
            self.graph.advance(self.sample_phases)
        self.sample_phases = False
        tr.step += 1
        zero = torch.zeros((), device=tr.device)
        return StepOutcome(StepStats(0, 0, skipped=False, trained=False), zero, zero)

    def density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        """The occupancy update's densities [N] at ``positions`` [N, 3]."""
        tr = self.trainer
        return density_without_grad(tr.field, positions, tr.device, tr.cfg.training.precision)

    def startup_steps(self) -> int:
        """The captured step's eager warm-up, its capture and first replay; one eager step."""
        return WARMUP_STEPS + 1 if self.graph is not None else 1

    # ------------------------------------------------------------------ the step body
    def run(self) -> None:
        """Queue one step (data → march → compact → field → render → appearance → loss → backward →
        Adam → batch sizing → interval sums); reads nothing on the host (module docstring)."""
        tr = self.trainer
        timer = tr.timer
        live = self.ray_slot < self.n_live
        with timer.phase("data"):
            batch = tr.inputs.draw_batch(self.ray_capacity)
            background, target = tr.inputs.background_and_target(batch, self.ray_capacity)
            rays_o = torch.where(live[:, None], batch.rays_o, float("nan"))
        with timer.phase("march"):
            marched = march_fixed(rays_o, batch.rays_d, tr.aabb, tr.grid, self.buffers, step_size=MIN_STEP_SIZE,
                                  cone_angle=tr.cone_angle, max_steps=tr.cfg.training.max_march_steps,
                                  max_step_size=tr.max_step_size, generator=tr.generator,
                                  backend=tr.march_backend, rule=self.rule, near=tr.cfg.training.near_distance,
                                  background_steps=tr.background_steps)
        samples, ray_ok, n_kept, n_trained = self._training_samples(marched, live)
        with timer.phase("field_forward"):
            sigmas, rgbs = field_outputs(tr.field, samples, tr.device, tr.cfg.training.precision)
        with timer.phase("render"):
            rgb = render_rgb(sigmas.float(), rgbs.float(), samples, background, tr.triton_render)
            rgb = appearance_rgb(tr.field, rgb, batch.image_index)
            rgb = torch.where(ray_ok[:, None], rgb, target)
            loss, mse_all = loss_and_mse(rgb, target, self.n_live, tr.cfg.loss)
            distortion = distortion_term(sigmas.float(), samples, self.n_live, tr.distortion_weight)
            if distortion is not None:
                loss = loss + distortion
            opacity = alpha_term(sigmas.float(), samples, batch.alpha, ray_ok, self.n_live, tr.alpha_weight)
            if opacity is not None:
                loss = loss + opacity
            mse = mse_all * (self.ray_capacity / self.n_live)  # rays past n_live predict exactly
        tr.optim.backward(loss)
        skipped = self._optimizer_step(marched.n_valid)
        self._size_batch(live & marched.ray_fits, n_kept, marched.n_valid, marched.n_clipped)
        self.metrics.add(loss, mse, self.n_live, n_trained, skipped, marched.n_clipped)

    def _training_samples(self, marched: Any, live: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch the step trains on, the rays it covers whole, the kept samples before the
        batch cut (sizes the rays) and the samples trained on (device scalars)."""
        tr = self.trainer
        ray_ok = live & marched.ray_fits
        if not tr.compact:
            return marched.samples, ray_ok, marched.n_valid, marched.n_valid
        with tr.timer.phase("compact"):
            with torch.no_grad():
                samples = marched.samples
                sigmas = density_without_grad(tr.field, samples.positions, tr.device, tr.cfg.training.precision,
                                              count=marched.n_valid)
                if tr.triton_render:
                    from trainer.render.triton_volrend import kept_counts_triton

                    kept = kept_counts_triton(sigmas, samples.dt, samples.packed_info, EARLY_STOP_TRANSMITTANCE)
                else:
                    kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE, valid=marched.valid)
                compacted = compact_samples(samples, kept, self.train_capacity, triton=tr.triton_render)
                n_trained = (~compacted.is_padding).sum()
        return compacted.samples, ray_ok & compacted.ray_fits, compacted.n_kept, n_trained

    def _optimizer_step(self, n_valid: torch.Tensor) -> torch.Tensor:
        """Learning rate, (scaled) Adam step, scaler update, weight average; returns whether the
        step was skipped (0-dim bool on the device: fp16 overflow, or no sample with a fused
        optimiser, which takes the flag)."""
        tr = self.trainer
        opt, scaler = tr.optimizer, tr.scaler
        with tr.timer.phase("optimizer"):
            if scaler.is_enabled():
                grads = [p.grad for p in tr.field.parameters() if p.grad is not None]
                skipped = ~torch.isfinite(torch.nn.utils.get_total_norm(grads))
                scaler.step(opt)
                scaler.update()
            else:
                skipped = n_valid == 0
                if opt.defaults.get("fused"):  # the fused kernels leave parameters alone on the flag
                    opt.grad_scale, opt.found_inf = None, skipped.float()
                opt.step()
            if tr.weight_ema is not None and (not scaler.is_enabled() or not bool(skipped)):
                tr.weight_ema.update(list(tr.field.parameters()))
        return skipped

    def _size_batch(self, marched_rays: torch.Tensor, n_kept: torch.Tensor, n_valid: torch.Tensor,
                    n_clipped: torch.Tensor) -> None:
        """The next step's ``n_live`` from this step's kept and marched samples per ray, and the
        capacities it needs (device)."""
        rays = marched_rays.sum().clamp(min=1).float()
        seen = n_kept > 0
        blend = torch.where(self.has_average, 0.9, 0.0)
        kept = blend * self.kept_per_ray + (1.0 - blend) * (n_kept.float() / rays)
        marched = blend * self.marched_per_ray + (1.0 - blend) * (n_valid.float() / rays)
        self.kept_per_ray.copy_(torch.where(seen, kept, self.kept_per_ray))
        self.marched_per_ray.copy_(torch.where(seen, marched, self.marched_per_ray))
        self.has_average.logical_or_(seen)
        rays_wanted = self.target / self.kept_per_ray.clamp(min=1e-3)
        wanted = torch.minimum(rays_wanted, self.march_capacity / self.marched_per_ray.clamp(min=1e-3))
        n_live = (torch.ceil(wanted / RAY_GRANULARITY) * RAY_GRANULARITY).clamp(RAY_GRANULARITY, self.ray_capacity)
        self.n_live.copy_(torch.where(self.has_average, n_live.long(), self.n_live))
        # the marched samples the wanted rays need (at least a ray granule's), or this step's
        # rays did (marched plus clipped)
        rays_needed = (torch.ceil(rays_wanted / RAY_GRANULARITY) * RAY_GRANULARITY).clamp(min=RAY_GRANULARITY)
        march_needed = torch.maximum(rays_needed * self.marched_per_ray, (n_valid + n_clipped).float())
        zero = torch.zeros((), device=rays_wanted.device)
        self.metrics.note_need(torch.where(self.has_average, rays_wanted, zero),
                               torch.where(self.has_average, march_needed, zero))

    # ------------------------------------------------------------------ host side
    def interval_values(self, interval: Interval, elapsed_s: float, record: dict[str, Any]) -> dict[str, Any]:
        """The interval's columns from the device sums (:meth:`device_values`) and, for a
        captured step, the sampled phase times (:meth:`sampled_phase_ms`); the next interval's
        first step samples the phases again.

        Raises:
            TrainingError: as :meth:`device_values`.
        """
        values = self.device_values(interval.steps, elapsed_s, interval.timed)
        values.update(self.sampled_phase_ms(record, interval.timed, record["step_time_ms"]))
        self.sample_phases = self.trainer.cfg.profile.phase_timers
        return values

    def device_values(self, steps: int, elapsed_s: float, timed_steps: int | None = None) -> dict[str, Any]:
        """The metrics columns of an interval of ``steps`` steps from the device sums (one read);
        rates per second over its ``timed_steps`` (default: all) in ``elapsed_s``. Capacities
        the batch sizing outgrew grow here (:meth:`fit_capacity`).

        Raises:
            TrainingError: ``optimization.MAX_CONSECUTIVE_OVERFLOWS`` skipped steps in a row.
        """
        sums = self.metrics.read()
        trained = sums["trained"]
        steps = max(steps, 1)
        per_s = max(timed_steps if timed_steps is not None else steps, 1) / steps / elapsed_s
        mse = sums["mse"] / trained if trained else 0.0
        if sums["skip_run_max"] >= optimization.MAX_CONSECUTIVE_OVERFLOWS:
            raise TrainingError(
                f"{int(sums['skip_run_max'])} consecutive steps were skipped (fp16 overflow or no sample) before step "
                f"{self.trainer.step}: with fp16 the model does not fit fp16's range (use training.precision bf16 or "
                "fp32); without, no ray sample hit an occupied cell")
        self.fit_capacity(sums["rays_wanted_max"], sums["march_needed_max"])
        return {
            "loss": sums["loss"] / trained if trained else None,
            "train_psnr_db": -10.0 * math.log10(mse) if mse > 0 else None,
            "rays_per_step": sums["rays"] / steps,
            "samples_per_step": sums["samples"] / steps,
            "rays_per_s": sums["rays"] * per_s,
            "throughput_samples_per_s": sums["samples"] * per_s,
            "rank_rays_per_s": sums["rays"] * per_s,
            "rank_throughput_samples_per_s": sums["samples"] * per_s,
            "skipped_steps": int(sums["skipped"]),
            "samples_clipped": sums["samples_clipped"],
            "ray_capacity": self.ray_capacity,
            "sample_capacity": self.march_capacity,
            "recaptures": self.recaptures,
        }

    def fit_capacity(self, rays_wanted: float, march_needed: float) -> bool:
        """Grow the buffers when the rays the batch sizing wanted (``rays_wanted``, the interval's
        maximum) or the marched samples they need exceed the capacities (module docstring);
        returns whether they grew. The captured graph is dropped; the next step captures again."""
        grow_rays = rays_wanted > self.ray_capacity and self.ray_capacity < self.max_rays
        grow_march = march_needed > self.march_capacity and self.march_capacity < self.max_march
        if not (grow_rays or grow_march):
            return False
        rays, march = self.ray_capacity, self.march_capacity
        if grow_rays:
            rays = min(self.max_rays, _round_up(rays_wanted * GROWTH, RAY_GRANULARITY))
        if grow_march:
            march = min(self.max_march, _round_up(march_needed * GROWTH, SAMPLE_GRANULARITY))
        self.forget_graph()
        self._allocate(rays, march)
        self.n_live.clamp_(max=self.ray_capacity)
        self.recaptures += 1
        return True

    def forget_graph(self) -> None:
        """Drop a captured graph (before the tensors it reads are replaced, e.g. a snapshot load)."""
        if self.graph is not None:
            self.graph.reset()

    def sampled_phase_ms(self, record: dict[str, Any], steps: int, step_time_ms: float) -> dict[str, float]:
        """Phase columns of a captured interval: the timed eager steps' means (the sampling mode
        of :mod:`trainer.train.capture`) instead of their sum spread over every step; the
        occupancy update, timed at each of its runs, stays as it is. Eager steps: unchanged."""
        if self.graph is None:
            return {}
        timed = self.graph.take_timed_steps()
        if not timed:
            return {}
        out = {}
        for phase in PHASES:
            value = record.get(f"{phase}_ms", 0.0)
            out[f"{phase}_ms"] = value if phase == "occupancy_update" else value * max(steps, 1) / timed
        out["other_ms"] = max(step_time_ms - sum(out.values()), 0.0)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The batch-sizing state (device scalars as numbers) and the capacities for snapshots."""
        return {"n_live": int(self.n_live), "kept_per_ray": float(self.kept_per_ray),
                "marched_per_ray": float(self.marched_per_ray), "has_average": bool(self.has_average),
                "ray_capacity": self.ray_capacity, "march_capacity": self.march_capacity,
                "recaptures": self.recaptures, "need_max": self.metrics.need_max.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (in place where the capacities agree: a captured graph keeps
        reading the same tensors; other capacities are allocated and the graph dropped)."""
        rays = int(state.get("ray_capacity", self.ray_capacity))  # (absent in older snapshots)
        march = int(state.get("march_capacity", self.march_capacity))
        if (rays, march) != (self.ray_capacity, self.march_capacity):
            self.forget_graph()
            self._allocate(rays, march)
        self.recaptures = int(state.get("recaptures", self.recaptures))
        if "need_max" in state:  # the interval's maxima so far decide the next growth
            self.metrics.need_max.copy_(torch.tensor(state["need_max"], dtype=torch.float64))
        self.n_live.fill_(int(state["n_live"]))
        self.kept_per_ray.fill_(float(state["kept_per_ray"]))
        self.marched_per_ray.fill_(float(state["marched_per_ray"]))
        self.has_average.fill_(bool(state["has_average"]))

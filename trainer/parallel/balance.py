"""Load balancing across ranks (DESIGN.md §3, "Load balancing").

* Static: ``distributed.gpu_capabilities[i].compute_power`` sets the initial ray shares
  (:func:`shares_from_capabilities`).
* Dynamic (data mode): every ``parallel.balance_every`` steps the shares move toward equal finish
  times (:class:`LoadBalancer`). Rank r's throughput is estimated as ``share_r / time_r`` (rays per
  ms up to a common factor), and the target share is that throughput normalised::

      target_r = (share_r / time_r) / Σ_q (share_q / time_q)
      share_r ← normalise(max(floor, smoothing · share_r + (1 − smoothing) · target_r))

  If compute time is proportional to the rays a rank draws, ``target`` equalises the finish times
  in one move; smoothing damps the reaction to noisy or non-proportional times (fixed per-step
  overheads), and the floor keeps every rank in the game so its speed stays measurable.
* Dynamic (subgrid mode): every ``parallel.balance_every`` steps whole boxes move from the rank
  that finishes last to a rank that finishes earlier (:class:`BoxBalancer`, :func:`plan_box_moves`).
  A rank's compute time is modelled as ``shared_r + rate_r · samples_r``: ``shared_r`` the work
  every rank does alike (drawing and marching the step's rays), ``samples_r`` the samples that
  fall in its boxes and ``rate_r`` its measured milliseconds per such sample. A move is made when
  the predicted slowest finish time drops by at least ``min_gain``; every rank keeps one box.

Every rank runs the same deterministic update on the same all-gathered times
(:func:`gather_compute_times`), so the shares agree on all ranks without a broadcast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from trainer.contract.config import GpuCapability, TrainConfig
from trainer.contract.errors import ConfigError, SnapshotError, TrainingError
from trainer.contract.world import check_rank_entries
from trainer.parallel.grad_sync import collective_device

__all__ = [
    "BoxBalancer",
    "BoxMove",
    "LoadBalancer",
    "gather_compute_times",
    "imbalance",
    "plan_box_moves",
    "shares_from_capabilities",
    "split_by_shares",
]

DEFAULT_SMOOTHING = 0.5
DEFAULT_MIN_SHARE_FRACTION = 0.1  # floor = this / world_size


def _check_world_size(world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"distributed.world_size: expected an integer >= 1, got {world_size!r}")
    return world_size


def shares_from_capabilities(
    capabilities: Sequence[GpuCapability], world_size: int
) -> list[float]:
    """Static ray shares proportional to each rank's ``compute_power``.

    Ranks missing from ``capabilities`` take the mean compute power of the listed ones (all equal
    when the list is empty).

    Args:
        capabilities: ``distributed.gpu_capabilities`` entries.
        world_size: number of ranks.

    Returns:
        ``world_size`` shares > 0 summing to 1.

    Raises:
        ConfigError: ``distributed.gpu_capabilities[i].rank: expected a rank < world size (n),
            got r`` for a rank that does not exist; ``distributed.world_size`` if it is < 1.
    """
    world_size = _check_world_size(world_size)
    check_rank_entries("distributed.gpu_capabilities[{i}].rank", (entry.rank for entry in capabilities), world_size)
    powers = {entry.rank: float(entry.compute_power) for entry in capabilities}
    default = sum(powers.values()) / len(powers) if powers else 1.0
    raw = [powers.get(rank, default) for rank in range(world_size)]
    total = sum(raw)
    return [p / total for p in raw]


def imbalance(times: Sequence[float]) -> float:
    """Load imbalance ``max(times) / mean(times)`` (1 = balanced; DESIGN.md §4 diagnosis 5).

    Args:
        times: per-rank compute times (any one unit), >= 0.

    Returns:
        The ratio, >= 1; 1.0 when every time is zero.
    """
    assert len(times) > 0
    mean = sum(times) / len(times)
    return 1.0 if mean <= 0 else max(times) / mean


def split_by_shares(total: int, shares: Sequence[float]) -> list[int]:
    """Integer split of ``total`` proportional to ``shares`` that sums exactly to ``total``.

    Largest-remainder (Hamilton) rule: rank r gets ``floor(total · share_r)``, and the units left
    over go one each to the ranks with the largest fractional parts (ties: lower rank first).

    Args:
        total: the count to split (>= 0), e.g. global rays per step.
        shares: per-rank shares >= 0 summing to 1.

    Returns:
        Per-rank counts, ``sum == total``; each within 1 of ``total · share_r``.
    """
    assert total >= 0 and len(shares) > 0
    quotas = [total * s for s in shares]
    counts = [int(math.floor(q)) for q in quotas]
    left = total - sum(counts)
    assert 0 <= left <= len(shares), (total, shares)
    order = sorted(range(len(shares)), key=lambda r: (-(quotas[r] - counts[r]), r))
    for r in order[:left]:
        counts[r] += 1
    return counts


def _apply_floor(shares: Sequence[float], floor: float) -> list[float]:
    """Normalise ``shares`` to sum 1 with every share >= ``floor`` (ranks below are raised to the
    floor and the others scaled down proportionally; repeated until none is below)."""
    n = len(shares)
    assert 0.0 <= floor * n <= 1.0 + 1e-12
    out = list(shares)
    fixed = [False] * n
    for _ in range(n):
        free_total = 1.0 - floor * sum(fixed)
        free_sum = sum(s for s, f in zip(out, fixed) if not f)
        out = [floor if f else s / free_sum * free_total for s, f in zip(out, fixed)]
        below = [r for r in range(n) if not fixed[r] and out[r] < floor]
        if not below:
            break
        for r in below:
            fixed[r] = True
    else:
        out = [floor if f else s for s, f in zip(out, fixed)]
    return out


class LoadBalancer:
    """Per-rank ray shares that move toward equal compute finish times.

    Args:
        world_size: number of ranks.
        initial_shares: starting shares (> 0, length ``world_size``; normalised here), e.g. from
            :func:`shares_from_capabilities`; None for equal shares.
        every_n_steps: steps per balancing round (``parallel.balance_every``); 0 keeps the shares
            static (:meth:`record` then only checks the times).
        smoothing: weight in [0, 1) kept on the old shares at each round (0 jumps to the target).
        min_share: floor of every share, in [0, 1/world_size]; default ``0.1 / world_size``.

    Raises:
        ConfigError: ``distributed.world_size`` < 1 or ``parallel.balance_every`` < 0.
    """

    def __init__(
        self,
        world_size: int,
        *,
        initial_shares: Sequence[float] | None = None,
        every_n_steps: int = 0,
        smoothing: float = DEFAULT_SMOOTHING,
        min_share: float | None = None,
    ) -> None:
        self.world_size = _check_world_size(world_size)
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 0:
            raise ConfigError(
                f"parallel.balance_every: expected an integer >= 0, got {every_n_steps!r}"
            )
        assert 0.0 <= smoothing < 1.0, smoothing
        self.every_n_steps = every_n_steps
        self.smoothing = float(smoothing)
        self.min_share = (
            DEFAULT_MIN_SHARE_FRACTION / world_size if min_share is None else float(min_share)
        )
        assert 0.0 <= self.min_share * world_size <= 1.0, self.min_share
        if initial_shares is None:
            initial_shares = [1.0] * world_size
        assert len(initial_shares) == world_size, (len(initial_shares), world_size)
        assert all(math.isfinite(s) and s > 0 for s in initial_shares), initial_shares
        self._shares = _apply_floor([float(s) for s in initial_shares], self.min_share)
        self._window_time_ms = [0.0] * world_size
        self._window_steps = 0
        self.rounds = 0
        self.last_imbalance: float | None = None

    @classmethod
    def from_config(cls, cfg: TrainConfig, world_size: int) -> LoadBalancer:
        """Static shares from ``distributed.gpu_capabilities``, rounds every
        ``parallel.balance_every`` steps.

        Raises:
            ConfigError: as :func:`shares_from_capabilities`.
        """
        shares = shares_from_capabilities(cfg.distributed.gpu_capabilities, world_size)
        return cls(world_size, initial_shares=shares, every_n_steps=cfg.parallel.balance_every)

    @property
    def shares(self) -> tuple[float, ...]:
        """Current ray share of each rank (sum 1, each >= ``min_share``)."""
        return tuple(self._shares)

    def rays_per_rank(self, global_rays: int) -> list[int]:
        """Rays each rank draws this step, summing exactly to ``global_rays`` (see
        :func:`split_by_shares`). A rank may get 0 rays when ``global_rays`` is small."""
        return split_by_shares(global_rays, self._shares)

    def rays_for_rank(self, global_rays: int, rank: int) -> int:
        """This rank's rays of ``global_rays`` (the same split on every rank)."""
        assert 0 <= rank < self.world_size, (rank, self.world_size)
        return self.rays_per_rank(global_rays)[rank]

    def record(self, compute_times_ms: Sequence[float]) -> bool:
        """Add one step's per-rank compute times; at the end of a round, move the shares.

        Args:
            compute_times_ms: ``world_size`` compute times of this step, ms, excluding time spent
                waiting in collectives (e.g. from :func:`gather_compute_times`).

        Returns:
            True if this step ended a balancing round (shares may have changed).

        Raises:
            TrainingError: for a negative or non-finite time (names the rank and value).
        """
        assert len(compute_times_ms) == self.world_size, (len(compute_times_ms), self.world_size)
        for rank, t in enumerate(compute_times_ms):
            if not math.isfinite(t) or t < 0:
                raise TrainingError(
                    f"load balancer: rank {rank} reported compute time {t!r} ms "
                    "(expected a finite value >= 0)"
                )
        if self.every_n_steps == 0:
            return False
        self._window_time_ms = [a + float(t) for a, t in zip(self._window_time_ms, compute_times_ms)]
        self._window_steps += 1
        if self._window_steps < self.every_n_steps:
            return False
        mean_ms = [t / self._window_steps for t in self._window_time_ms]
        self.last_imbalance = imbalance(mean_ms)
        self._shares = self.target_shares(mean_ms)
        self._window_time_ms = [0.0] * self.world_size
        self._window_steps = 0
        self.rounds += 1
        return True

    def target_shares(self, mean_times_ms: Sequence[float]) -> list[float]:
        """The shares after one round given each rank's mean compute time per step (ms).

        ``share_r / time_r`` estimates rank r's throughput; ranks that reported 0 ms take the mean
        throughput of the others (all equal if none reported time). Then smoothing and the floor
        apply as in the module docstring. Pure: does not change the balancer.
        """
        speeds: list[float | None] = [
            s / t if t > 0 else None for s, t in zip(self._shares, mean_times_ms)
        ]
        known = [v for v in speeds if v is not None]
        fill = sum(known) / len(known) if known else 1.0
        filled = [fill if v is None else v for v in speeds]
        total = sum(filled)
        target = [v / total for v in filled]
        a = self.smoothing
        mixed = [a * old + (1.0 - a) * new for old, new in zip(self._shares, target)]
        return _apply_floor(mixed, self.min_share)

    def state_dict(self) -> dict[str, Any]:
        """Plain data for snapshots: world size, shares, the open window, rounds done."""
        return {
            "world_size": self.world_size,
            "shares": list(self._shares),
            "window_time_ms": list(self._window_time_ms),
            "window_steps": self._window_steps,
            "rounds": self.rounds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> bool:
        """Restore from :meth:`state_dict`.

        A state written with another world size (a resume on a different number of ranks) is
        ignored: the current (initial) shares are kept, since per-rank shares do not carry over.

        Returns:
            True if the state was applied, False if it was for another world size.

        Raises:
            SnapshotError: for a malformed state (names the key and the value).
        """
        def bad(key: str, expected: str) -> SnapshotError:
            value = repr(state.get(key))
            return SnapshotError(f"load balancer state: {key}: expected {expected}, got {value[:80]}")

        for key in ("world_size", "window_steps", "rounds"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad(key, "an integer >= 0")
        if state["world_size"] != self.world_size:
            return False
        n = self.world_size
        for key in ("shares", "window_time_ms"):
            value = state.get(key)
            if (
                not isinstance(value, (list, tuple))
                or len(value) != n
                or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in value)
            ):
                raise bad(key, f"a list of {n} finite numbers >= 0")
        shares = [float(v) for v in state["shares"]]
        if not math.isclose(sum(shares), 1.0, abs_tol=1e-6) or min(shares) <= 0:
            raise bad("shares", "positive shares summing to 1")
        self._shares = shares
        self._window_time_ms = [float(v) for v in state["window_time_ms"]]
        self._window_steps = int(state["window_steps"])
        self.rounds = int(state["rounds"])
        return True


def gather_compute_times(local_time_ms: float, group: dist.ProcessGroup | None = None) -> list[float]:
    """All-gather each rank's compute time (one small collective; a host sync on CUDA).

    Args:
        local_time_ms: this rank's compute time, ms (>= 0).
        group: process group (default: the world).

    Returns:
        ``world_size`` times in rank order, identical on every rank.
    """
    device = collective_device(group)
    world_size = dist.get_world_size(group)
    local = torch.tensor([float(local_time_ms)], dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local, group=group)
    return torch.cat(gathered).tolist()



# ------------------------------------------------------------------------------ subgrid boxes

DEFAULT_MIN_GAIN = 0.05  # a box moves only if the predicted slowest finish time drops by 5 %
DEFAULT_MAX_MOVES_PER_ROUND = 1


class BoxMove(NamedTuple):
    """One box changing owner (:meth:`trainer.parallel.subgrid.SubgridModel.move_box` arguments).

    Attributes:
        box: box index k.
        src: its owner before the move.
        dst: its owner after.
        makespan_before_ms: predicted slowest rank time per step before the move, ms.
        makespan_after_ms: predicted slowest rank time per step after it, ms.
    """

    box: int
    src: int
    dst: int
    makespan_before_ms: float
    makespan_after_ms: float


def plan_box_moves(
    owners: Sequence[int],
    box_samples: Sequence[float],
    shared_ms: Sequence[float],
    box_ms: Sequence[float],
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    max_moves: int = DEFAULT_MAX_MOVES_PER_ROUND,
) -> list[BoxMove]:
    """Box moves toward equal finish times (subgrid load balancing; pure and deterministic).

    Model of rank r's compute time per step (module docstring)::

        finish_r = shared_r + rate_r · Σ_{k owned by r} samples_k,   rate_r = box_ms_r / samples_r

    A rank without samples in its boxes (or without box time) takes the mean rate of the others.
    Each move takes a box from the rank with the largest predicted finish time (the lowest rank on
    ties) to the rank where it gives the smallest new maximum (ties: lower box index, lower rank),
    and is kept only if that maximum is below ``(1 − min_gain)`` times the current one. The source
    rank keeps at least one box. At most ``max_moves`` moves, applied one after the other.

    Args:
        owners: [K] owner rank of each box, ranks ``0 .. W-1`` (W = ``len(shared_ms)``).
        box_samples: [K] samples per step in each box (mean over the round), >= 0.
        shared_ms: [W] per-rank time of the work every rank does alike, ms >= 0.
        box_ms: [W] per-rank time of the work on its own boxes, ms >= 0.
        min_gain: required relative drop of the predicted maximum, in [0, 1).
        max_moves: moves at most (>= 0).

    Returns:
        The moves in the order they are to be made (empty when none helps).

    Example:
        >>> plan_box_moves([0, 0, 1, 1], [1, 1, 1, 1], [0, 0], [2.0, 6.0])  # rank 1 3x slower
        [BoxMove(box=2, src=1, dst=0, makespan_before_ms=6.0, makespan_after_ms=3.0)]
    """
    world_size = len(shared_ms)
    assert len(box_ms) == world_size and len(owners) == len(box_samples), (owners, box_samples, shared_ms, box_ms)
    assert all(0 <= r < world_size for r in owners), (owners, world_size)
    assert 0.0 <= min_gain < 1.0 and max_moves >= 0, (min_gain, max_moves)
    owners = list(owners)
    samples = [float(s) for s in box_samples]
    work = [0.0] * world_size
    for k, r in enumerate(owners):
        work[r] += samples[k]
    rates: list[float | None] = [
        float(box_ms[r]) / work[r] if work[r] > 0 and box_ms[r] > 0 else None for r in range(world_size)
    ]
    known = [v for v in rates if v is not None]
    if not known:
        return []
    fill = sum(known) / len(known)
    rate = [fill if v is None else v for v in rates]

    def finish(r: int, rank_work: float) -> float:
        return float(shared_ms[r]) + rate[r] * rank_work

    moves: list[BoxMove] = []
    for _ in range(max_moves):
        times = [finish(r, work[r]) for r in range(world_size)]
        current = max(times)
        src = times.index(current)
        mine = [k for k, r in enumerate(owners) if r == src]
        if len(mine) < 2:
            break
        best: tuple[float, int, int] | None = None
        for k in mine:
            for dst in range(world_size):
                if dst == src:
                    continue
                after = list(times)
                after[src] = finish(src, work[src] - samples[k])
                after[dst] = finish(dst, work[dst] + samples[k])
                candidate = (max(after), k, dst)
                if best is None or candidate < best:
                    best = candidate
        if best is None or not best[0] < (1.0 - min_gain) * current:
            break
        makespan, k, dst = best
        moves.append(BoxMove(k, src, dst, current, makespan))
        owners[k] = dst
        work[src] -= samples[k]
        work[dst] += samples[k]
    return moves


class BoxBalancer:
    """Subgrid box ownership that moves toward equal compute finish times.

    Every rank feeds the same all-gathered numbers each step (:meth:`record`); at the end of a
    round of ``every_n_steps`` steps it returns the moves of :func:`plan_box_moves` on the round's
    means, identical on every rank, which the caller makes with
    :meth:`~trainer.parallel.subgrid.SubgridModel.move_box`.

    Args:
        world_size: number of ranks.
        num_boxes: K (``parallel.num_subgrids``).
        every_n_steps: steps per round (``parallel.balance_every``); 0 never moves a box.
        min_gain: see :func:`plan_box_moves`.
        max_moves_per_round: see ``max_moves`` of :func:`plan_box_moves`.

    Raises:
        ConfigError: ``distributed.world_size`` < 1 or ``parallel.balance_every`` < 0.
    """

    def __init__(
        self,
        world_size: int,
        num_boxes: int,
        every_n_steps: int,
        *,
        min_gain: float = DEFAULT_MIN_GAIN,
        max_moves_per_round: int = DEFAULT_MAX_MOVES_PER_ROUND,
    ) -> None:
        self.world_size = _check_world_size(world_size)
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 0:
            raise ConfigError(f"parallel.balance_every: expected an integer >= 0, got {every_n_steps!r}")
        assert num_boxes >= world_size, (num_boxes, world_size)
        self.num_boxes = num_boxes
        self.every_n_steps = every_n_steps
        self.min_gain = float(min_gain)
        self.max_moves_per_round = int(max_moves_per_round)
        self.rounds = 0
        self.moves_made = 0
        self.last_imbalance: float | None = None
        self.reset_window()

    def reset_window(self) -> None:
        """Forget the open round (after the boxes were re-cut or re-assigned)."""
        self._shared_ms = [0.0] * self.world_size
        self._box_ms = [0.0] * self.world_size
        self._box_samples = [0.0] * self.num_boxes
        self._window_steps = 0

    def record(
        self,
        owners: Sequence[int],
        shared_ms: Sequence[float],
        box_ms: Sequence[float],
        box_samples: Sequence[float],
    ) -> list[BoxMove]:
        """Add one step; at the end of a round, plan the moves.

        Args:
            owners: [K] current owner of each box (unchanged within a round).
            shared_ms: [W] each rank's time of the shared work this step, ms.
            box_ms: [W] each rank's time of the work on its boxes this step, ms.
            box_samples: [K] samples in each box this step.

        Returns:
            The moves to make now (empty inside a round, or when none helps).

        Raises:
            TrainingError: for a negative or non-finite time or count (names the rank or box).
        """
        assert len(owners) == len(box_samples) == self.num_boxes, (owners, box_samples)
        assert len(shared_ms) == len(box_ms) == self.world_size, (shared_ms, box_ms)
        for what, values in (("shared compute time", shared_ms), ("box compute time", box_ms)):
            for rank, t in enumerate(values):
                if not math.isfinite(t) or t < 0:
                    raise TrainingError(
                        f"box balancer: rank {rank} reported {what} {t!r} ms (expected a finite value >= 0)"
                    )
        for box, n in enumerate(box_samples):
            if not math.isfinite(n) or n < 0:
                raise TrainingError(f"box balancer: box {box} reported {n!r} samples (expected >= 0)")
        if self.every_n_steps == 0:
            return []
        self._shared_ms = [a + float(t) for a, t in zip(self._shared_ms, shared_ms)]
        self._box_ms = [a + float(t) for a, t in zip(self._box_ms, box_ms)]
        self._box_samples = [a + float(n) for a, n in zip(self._box_samples, box_samples)]
        self._window_steps += 1
        if self._window_steps < self.every_n_steps:
            return []
        steps = self._window_steps
        shared = [t / steps for t in self._shared_ms]
        boxes = [t / steps for t in self._box_ms]
        self.last_imbalance = imbalance([a + b for a, b in zip(shared, boxes)])
        moves = plan_box_moves(
            owners, [n / steps for n in self._box_samples], shared, boxes,
            min_gain=self.min_gain, max_moves=self.max_moves_per_round,
        )
        self.reset_window()
        self.rounds += 1
        self.moves_made += len(moves)
        return moves

    def state_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints: world size, box count, rounds and moves done."""
        return {"world_size": self.world_size, "num_boxes": self.num_boxes, "rounds": self.rounds,
                "moves_made": self.moves_made}

    def load_state_dict(self, state: Mapping[str, Any]) -> bool:
        """Restore the counters of :meth:`state_dict` (the open round starts afresh).

        Returns:
            True if applied, False for a state of another world size or box count.

        Raises:
            SnapshotError: for a malformed state (names the key and the value).
        """
        for key in ("world_size", "num_boxes", "rounds", "moves_made"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SnapshotError(
                    f"box balancer state: {key}: expected an integer >= 0, got {repr(value)[:80]}"
                )
        if (state["world_size"], state["num_boxes"]) != (self.world_size, self.num_boxes):
            return False
        self.rounds = int(state["rounds"])
        self.moves_made = int(state["moves_made"])
        self.reset_window()
        return True

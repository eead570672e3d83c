"""Load balancer, integer ray split, subgrid box moves."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.contract.config import GpuCapability, TrainConfig, apply_overrides
from trainer.contract.errors import ConfigError, SnapshotError, TrainingError
from trainer.parallel.balance import (
    BoxBalancer,
    BoxMove,
    LoadBalancer,
    gather_compute_times,
    imbalance,
    plan_box_moves,
    shares_from_capabilities,
    split_by_shares,
)

# ------------------------------------------------------------------------------ dynamic shares


def simulate(balancer: LoadBalancer, step_time_ms, rounds: int, global_rays: int = 2**16) -> list[float]:
    """Run ``rounds`` balancing rounds; ``step_time_ms(rank, rays)`` models a rank's compute time.
    Returns the per-rank times of the last step."""
    times = []
    for _ in range(rounds * balancer.every_n_steps):
        rays = balancer.rays_per_rank(global_rays)
        times = [step_time_ms(rank, n) for rank, n in enumerate(rays)]
        balancer.record(times)
    return times


def test_rank_twice_as_slow_converges_to_a_third_of_the_rays() -> None:
    speed_ms_per_ray = [1e-3, 2e-3]  # rank 1 takes twice as long per ray
    balancer = LoadBalancer(2, every_n_steps=4)
    assert balancer.shares == (0.5, 0.5)
    times = simulate(balancer, lambda r, n: n * speed_ms_per_ray[r], rounds=50)
    assert balancer.rounds == 50
    assert imbalance(times) < 1.15
    assert balancer.shares[1] == pytest.approx(1 / 3, abs=0.03)
    assert sum(balancer.shares) == pytest.approx(1.0)
    assert balancer.last_imbalance is not None and balancer.last_imbalance < 1.15


def test_first_round_moves_halfway_to_the_target() -> None:
    # Times 1 ms and 2 ms at shares (1/2, 1/2): speeds 1/2 and 1/4 → target (2/3, 1/3);
    # smoothing 0.5 → (0.5·1/2 + 0.5·2/3, 0.5·1/2 + 0.5·1/3) = (7/12, 5/12).
    balancer = LoadBalancer(2, every_n_steps=2, smoothing=0.5)
    assert balancer.record([1.0, 2.0]) is False  # the round is not over yet
    assert balancer.shares == (0.5, 0.5)
    assert balancer.record([1.0, 2.0]) is True
    assert balancer.shares == pytest.approx((7 / 12, 5 / 12))
    assert balancer.last_imbalance == pytest.approx(2.0 / 1.5)


def test_overhead_and_noise_still_balance_three_ranks() -> None:
    rng = random.Random(7)
    ms_per_ray = [1e-3, 1.5e-3, 3e-3]
    overhead_ms = 5.0  # per step, not proportional to the rays

    def step_time_ms(rank: int, rays: int) -> float:
        return (overhead_ms + rays * ms_per_ray[rank]) * rng.uniform(0.97, 1.03)

    balancer = LoadBalancer(3, every_n_steps=5)
    simulate(balancer, step_time_ms, rounds=50)
    rays = balancer.rays_per_rank(2**16)
    noiseless = [overhead_ms + n * ms_per_ray[r] for r, n in enumerate(rays)]
    assert imbalance(noiseless) < 1.05
    # Equal finish time T: rays_r = (T − overhead) / ms_per_ray_r, so shares ∝ 1 / ms_per_ray.
    inverse = [1 / m for m in ms_per_ray]
    expected = [v / sum(inverse) for v in inverse]
    assert balancer.shares == pytest.approx(expected, abs=0.02)


def test_share_floor_keeps_a_very_slow_rank_in_play() -> None:
    balancer = LoadBalancer(2, every_n_steps=1, smoothing=0.0, min_share=0.1)
    balancer.record([1.0, 100.0])  # target (100/101, 1/101) → rank 1 raised to the floor
    assert balancer.shares == pytest.approx((0.9, 0.1))


def test_zero_time_keeps_the_rank_at_the_mean_speed() -> None:
    balancer = LoadBalancer(3, every_n_steps=1, smoothing=0.0, min_share=0.0)
    # Rank 2 drew no rays (0 ms): its speed is taken as the mean of the others' (1/3, 1/6 → 1/4).
    balancer.record([1.0, 2.0, 0.0])
    speeds = [1 / 3, 1 / 6, 1 / 4]
    assert balancer.shares == pytest.approx([s / sum(speeds) for s in speeds])


def test_static_balancer_never_moves() -> None:
    balancer = LoadBalancer(2, initial_shares=[3.0, 1.0], every_n_steps=0)
    for _ in range(10):
        assert balancer.record([1.0, 9.0]) is False
    assert balancer.shares == pytest.approx((0.75, 0.25))


def test_bad_times_and_settings_raise_clear_errors() -> None:
    balancer = LoadBalancer(2, every_n_steps=1)
    with pytest.raises(TrainingError, match=r"rank 1 reported compute time nan ms"):
        balancer.record([1.0, float("nan")])
    with pytest.raises(TrainingError, match=r"rank 0 reported compute time -1.0 ms"):
        balancer.record([-1.0, 1.0])
    with pytest.raises(ConfigError, match=r"parallel\.balance_every: expected an integer >= 0, got -1"):
        LoadBalancer(2, every_n_steps=-1)
    with pytest.raises(ConfigError, match=r"distributed\.world_size: expected an integer >= 1, got 0"):
        LoadBalancer(0)


def test_imbalance_is_max_over_mean() -> None:
    assert imbalance([1.0, 2.0, 3.0]) == pytest.approx(1.5)
    assert imbalance([4.0, 4.0]) == 1.0
    assert imbalance([0.0, 0.0]) == 1.0


# ------------------------------------------------------------------------------ static shares


def test_static_shares_from_capabilities() -> None:
    caps = [GpuCapability(rank=0, compute_power=2.0), GpuCapability(rank=1, compute_power=1.0)]
    assert shares_from_capabilities(caps, 2) == pytest.approx([2 / 3, 1 / 3])
    # Rank 2 is not listed: it takes the mean power 1.5 → (2, 1, 1.5) / 4.5.
    assert shares_from_capabilities(caps, 3) == pytest.approx([4 / 9, 2 / 9, 3 / 9])
    assert shares_from_capabilities([], 4) == pytest.approx([0.25] * 4)


def test_capability_for_a_rank_that_does_not_exist_names_the_key() -> None:
    caps = [GpuCapability(rank=0, compute_power=1.0), GpuCapability(rank=2, compute_power=1.0)]
    with pytest.raises(
        ConfigError,
        match=r"^distributed\.gpu_capabilities\[1\]\.rank: expected a rank < world size \(2\), got 2$",
    ):
        shares_from_capabilities(caps, 2)


def test_balancer_from_config() -> None:
    cfg = apply_overrides(
        TrainConfig(),
        {
            "parallel.balance_every": 25,
            "distributed.gpu_capabilities": [
                {"rank": 0, "compute_power": 1.0, "type": "A100"},
                {"rank": 1, "compute_power": 3.0, "type": "H200"},
            ],
        },
    )
    balancer = LoadBalancer.from_config(cfg, world_size=2)
    assert balancer.every_n_steps == 25
    assert balancer.shares == pytest.approx((0.25, 0.75))
    assert balancer.rays_per_rank(1000) == [250, 750]
    with pytest.raises(ConfigError, match=r"gpu_capabilities\[1\]\.rank: .*world size \(1\), got 1"):
        LoadBalancer.from_config(cfg, world_size=1)


# ------------------------------------------------------------------------------ ray split


def test_largest_remainder_split_by_hand() -> None:
    assert split_by_shares(10, [0.5, 0.3, 0.2]) == [5, 3, 2]
    # Quotas 3.5, 2.1, 1.4 → floors 3, 2, 1 (6); the one ray left goes to rank 0 (.5 largest).
    assert split_by_shares(7, [0.5, 0.3, 0.2]) == [4, 2, 1]
    # Equal shares, 5 rays on 3 ranks: floors 1,1,1; ties go to the lower ranks.
    assert split_by_shares(5, [1 / 3, 1 / 3, 1 / 3]) == [2, 2, 1]
    assert split_by_shares(0, [0.5, 0.5]) == [0, 0]
    assert split_by_shares(1, [0.5, 0.5]) == [1, 0]  # a rank may get no rays


@settings(max_examples=100, deadline=None)
@given(
    total=st.integers(0, 10**7),
    raw=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=9),
)
def test_split_sums_exactly_and_stays_within_one_ray(total, raw) -> None:
    shares = [r / sum(raw) for r in raw]
    counts = split_by_shares(total, shares)
    assert sum(counts) == total
    assert all(abs(c - total * s) < 1.0 + 1e-9 for c, s in zip(counts, shares))
    balancer = LoadBalancer(len(raw), initial_shares=raw, min_share=0.0)
    assert [balancer.rays_for_rank(total, r) for r in range(len(raw))] == counts


# ------------------------------------------------------------------------------ checkpoints


def test_state_dict_round_trip() -> None:
    balancer = LoadBalancer(2, every_n_steps=3)
    for times in ([1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 3.0]):  # one round, one open step
        balancer.record(times)
    state = balancer.state_dict()
    restored = LoadBalancer(2, every_n_steps=3)
    assert restored.load_state_dict(state) is True
    assert restored.state_dict() == state
    # The restored window finishes the round exactly as the original would.
    for b in (balancer, restored):
        b.record([1.0, 2.0])
        b.record([1.0, 2.0])
    assert restored.shares == balancer.shares and restored.rounds == 2


def test_state_for_another_world_size_keeps_the_initial_shares() -> None:
    state = LoadBalancer(2, initial_shares=[1.0, 3.0]).state_dict()
    balancer = LoadBalancer(3, every_n_steps=1)
    assert balancer.load_state_dict(state) is False
    assert balancer.shares == pytest.approx((1 / 3, 1 / 3, 1 / 3))


def test_malformed_state_raises_snapshot_error() -> None:
    state = LoadBalancer(2).state_dict()
    with pytest.raises(SnapshotError, match=r"shares: expected a list of 2 finite numbers"):
        LoadBalancer(2).load_state_dict({**state, "shares": [1.0]})
    with pytest.raises(SnapshotError, match=r"shares: expected positive shares summing to 1"):
        LoadBalancer(2).load_state_dict({**state, "shares": [0.2, 0.2]})
    with pytest.raises(SnapshotError, match=r"rounds: expected an integer >= 0, got None"):
        LoadBalancer(2).load_state_dict({k: v for k, v in state.items() if k != "rounds"})


# ------------------------------------------------------------------------------ process group


def test_gather_compute_times_feeds_the_balancer(tmp_path) -> None:
    """One-rank gloo group in this process: the gather returns this rank's time in rank order."""
    assert not dist.is_initialized()
    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp_path / 'store'}",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=30),
    )
    try:
        times = gather_compute_times(12.5)
        assert times == [12.5]
        balancer = LoadBalancer(dist.get_world_size(), every_n_steps=1)
        assert balancer.record(times) is True
        assert balancer.shares == (1.0,)
        assert math.isclose(balancer.last_imbalance, 1.0)
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------ subgrid box moves


def test_box_move_from_a_three_times_slower_rank_by_hand() -> None:
    # rank 1 needs 6 ms for 2 samples-units, rank 0 2 ms: rates 1 and 3 ms per unit; moving box 2
    # gives finish times (3, 3); box 3 would too, the lower index wins.
    moves = plan_box_moves([0, 0, 1, 1], [1, 1, 1, 1], [0.0, 0.0], [2.0, 6.0])
    assert moves == [BoxMove(2, 1, 0, 6.0, 3.0)]


def test_box_moves_count_the_shared_time_and_stop_without_gain() -> None:
    # shared 10 ms each; rank 1 slower per sample: 10 + 2·4 = 18 vs 10 + 1·4 = 14. Moving a box of
    # 1 sample: rank 1 → 10 + 2·3 = 16, rank 0 → 10 + 1·5 = 15; max 16 < 0.95·18 = 17.1: made.
    assert plan_box_moves([0, 0, 1, 1], [3, 1, 3, 1], [10.0, 10.0], [4.0, 8.0]) == [BoxMove(3, 1, 0, 18.0, 16.0)]
    # with a 15 % gain required the same move is not worth it
    assert plan_box_moves([0, 0, 1, 1], [3, 1, 3, 1], [10.0, 10.0], [4.0, 8.0], min_gain=0.15) == []
    # balanced ranks: nothing moves
    assert plan_box_moves([0, 0, 1, 1], [1, 1, 1, 1], [1.0, 1.0], [2.0, 2.0]) == []


def test_box_moves_keep_a_box_on_every_rank_and_chain() -> None:
    # rank 1 is 100x slower: it gives boxes away until it holds one (two moves allowed per round)
    moves = plan_box_moves([0, 1, 1, 1], [1, 1, 1, 1], [0.0, 0.0], [1.0, 300.0], max_moves=5)
    assert [(m.box, m.src, m.dst) for m in moves] == [(1, 1, 0), (2, 1, 0)]
    assert moves[0].makespan_after_ms == moves[1].makespan_before_ms == 200.0
    assert moves[1].makespan_after_ms == 100.0
    # a slow rank that owns a single box keeps it
    assert plan_box_moves([0, 0, 0, 1], [1, 1, 1, 1], [0.0, 0.0], [3.0, 100.0]) == []


def test_box_moves_fill_unknown_rates_with_the_mean() -> None:
    # rank 2's box had no samples: it takes the mean rate 3.5 ms/unit of ranks 0 (8 ms / 2 = 4) and
    # 1 (9 ms / 3 = 3). Finish times (8, 9, 0); rank 1 sends box 1 (1 unit) to rank 2: (8, 6, 3.5);
    # box 2 to rank 2 gives (8, 3, 7), the same maximum, and the lower box index wins.
    moves = plan_box_moves([0, 1, 1, 2], [2, 1, 2, 0], [0.0, 0.0, 0.0], [8.0, 9.0, 0.0])
    assert moves == [BoxMove(1, 1, 2, 9.0, 8.0)]
    assert plan_box_moves([0, 1], [0, 0], [1.0, 1.0], [0.0, 0.0]) == []  # nothing known: no move


def test_box_balancer_rounds_and_state() -> None:
    balancer = BoxBalancer(2, 4, every_n_steps=2)
    owners = [0, 0, 1, 1]
    assert balancer.record(owners, [1.0, 1.0], [2.0, 6.0], [1, 1, 1, 1]) == []  # round not over
    moves = balancer.record(owners, [1.0, 1.0], [2.0, 6.0], [1, 1, 1, 1])
    assert [(m.box, m.src, m.dst) for m in moves] == [(2, 1, 0)]
    assert balancer.rounds == 1 and balancer.moves_made == 1
    assert balancer.last_imbalance == pytest.approx(7.0 / 5.0)  # compute 3 and 7 ms
    state = balancer.state_dict()
    other = BoxBalancer(2, 4, every_n_steps=2)
    assert other.load_state_dict(state) and (other.rounds, other.moves_made) == (1, 1)
    assert not BoxBalancer(3, 4, every_n_steps=2).load_state_dict(state)  # another world size
    with pytest.raises(SnapshotError, match=r"^box balancer state: rounds: expected an integer >= 0, got -1$"):
        other.load_state_dict({**state, "rounds": -1})
    assert BoxBalancer(2, 4, every_n_steps=0).record(owners, [1.0, 1.0], [2.0, 60.0], [1, 1, 1, 1]) == []
    with pytest.raises(TrainingError, match=r"^box balancer: rank 1 reported box compute time nan ms"):
        balancer.record(owners, [1.0, 1.0], [2.0, float("nan")], [1, 1, 1, 1])
    with pytest.raises(ConfigError, match=r"^parallel\.balance_every: expected an integer >= 0, got -1$"):
        BoxBalancer(2, 4, every_n_steps=-1)

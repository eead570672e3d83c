"""GradientSynchronizer: 2 gloo ranks vs one process on the union of their samples.

One ``run_ranks`` (tests/support/ranks.py, module-scoped fixture) runs every scenario on both ranks; the
reference is computed in the test process. Each scenario builds the same seeded model (a tiny
``NGPField`` plus a float64 colour scale, so there are two gradient dtypes, plus one parameter that
no loss uses), lets rank 0 and rank 1 train on different sample sets, sums the gradients with the
synchroniser and takes one Adam step.

Adam runs with ``eps = 1e-6``: with instant-ngp's 1e-15 the first step moves every element by
``lr · sign(g)``, which would hide normalisation errors in near-zero elements and let rounding flip
signs; with 1e-6 the update depends on the gradient's size and is continuous in it. Rank 0 and
rank 1 have different sample counts, so a rank that normalised by its local count would change the
update's direction, not only its scale.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.support.ranks import run_ranks
from trainer.encoding.hashgrid import HashGridConfig
from trainer.contract.errors import ConfigError, LaunchError
from trainer.model.field import MLPConfig, NGPField
from trainer.parallel.grad_sync import (
    GradientSynchronizer,
    allreduce_bandwidth_gb_per_s,
    bus_factor,
    collective_bandwidth_gb_per_s,
    global_count,
)

WORLD_SIZE = 2
LR = 1e-2
ADAM_EPS = 1e-6
N_SAMPLES = (40, 24)  # set A (rank 0), set B (rank 1)


@dataclasses.dataclass(frozen=True)
class Scenario:
    bucket_mib: float
    compression: str = "none"
    overlap: bool = False
    data: str = "split"  # "split": rank 0 gets A, rank 1 gets B; "rank1_empty"; "all_empty"


TINY_BUCKET_MIB = 1e-4  # 104 bytes: every parameter gets a bucket of its own
SCENARIOS: dict[str, Scenario] = {
    "one_bucket": Scenario(bucket_mib=64.0),
    "many_buckets": Scenario(bucket_mib=TINY_BUCKET_MIB),
    "mid_buckets": Scenario(bucket_mib=0.02),
    "overlap_one_bucket": Scenario(bucket_mib=64.0, overlap=True),
    "overlap_many_buckets": Scenario(bucket_mib=TINY_BUCKET_MIB, overlap=True),
    "fp16": Scenario(bucket_mib=64.0, compression="fp16"),
    "bf16_overlap": Scenario(bucket_mib=0.02, compression="bf16", overlap=True),
    "rank1_empty": Scenario(bucket_mib=0.02, data="rank1_empty"),
    "rank1_empty_overlap": Scenario(bucket_mib=TINY_BUCKET_MIB, overlap=True, data="rank1_empty"),
    "all_empty": Scenario(bucket_mib=0.02, overlap=True, data="all_empty"),
}


class TinyModel(nn.Module):
    """A tiny NGP field, a float64 per-channel colour scale, and a parameter nothing uses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1234)
        self.field = NGPField(
            aabb=torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]),
            grid_cfg=HashGridConfig(
                n_levels=4, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4,
                max_resolution=32,
            ),
            density_net=MLPConfig(n_neurons=16, n_hidden_layers=1),
            rgb_net=MLPConfig(n_neurons=16, n_hidden_layers=2),
            backend="torch",
        )
        # The hash table starts at U(−1e-4, 1e-4); spread it so that gradients differ by sample.
        with torch.no_grad():
            for p in self.field.encoding_parameters():
                p.uniform_(-0.5, 0.5)
        self.colour_scale = nn.Parameter(torch.tensor([1.0, 0.9, 1.1], dtype=torch.float64))
        self.unused = nn.Parameter(torch.ones(5))

    def loss_sum(self, points: dict[str, torch.Tensor]) -> torch.Tensor:
        """Σ over samples of ``‖rgb·scale − target‖² + 0.1·σ`` (a per-sample loss, summed)."""
        sigma, rgb = self.field(points["positions"], points["directions"])
        colour = rgb.double() * self.colour_scale
        per_sample = ((colour - points["target"].double()) ** 2).sum(dim=1) + 0.1 * sigma.double()
        return per_sample.sum()


def sample_set(which: int) -> dict[str, torch.Tensor]:
    """Sample set A (0) or B (1): positions in the AABB, unit directions, target colours."""
    g = torch.Generator().manual_seed(100 + which)
    n = N_SAMPLES[which]
    directions = torch.randn(n, 3, generator=g)
    return {
        "positions": torch.rand(n, 3, generator=g) * 2 - 1,
        "directions": directions / directions.norm(dim=1, keepdim=True),
        "target": torch.rand(n, 3, generator=g),
    }


def empty_set() -> dict[str, torch.Tensor]:
    return {k: v[:0] for k, v in sample_set(0).items()}


def rank_samples(data: str, rank: int) -> dict[str, torch.Tensor]:
    if data == "split":
        return sample_set(rank)
    if data == "rank1_empty":
        return sample_set(0) if rank == 0 else empty_set()
    assert data == "all_empty"
    return empty_set()


def adam(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.99), eps=ADAM_EPS)


def _grad_sync_rank(rank: int, world_size: int) -> dict[str, object]:
    results: dict[str, object] = {}
    for name, scenario in SCENARIOS.items():
        model = TinyModel()
        points = rank_samples(scenario.data, rank)
        n_local = int(points["positions"].shape[0])
        sync = GradientSynchronizer(
            list(model.parameters()),
            bucket_mib=scenario.bucket_mib,
            compression=scenario.compression,
            overlap=scenario.overlap,
        )
        n_global = global_count(n_local)
        optimizer = adam(model)
        optimizer.zero_grad(set_to_none=True)
        if n_local > 0:  # a rank without samples runs no backward at all
            (model.loss_sum(points) / n_global).backward()
        any_gradient = sync.finish()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        if any_gradient:
            optimizer.step()
        sync.close()
        results[name] = {
            "n_global": n_global,
            "any_gradient": any_gradient,
            "grads": grads,
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "stats": sync.stats(),
            "bucket_sizes_bytes": sync.bucket_sizes_bytes,
        }
    # Ranks that disagree on the settings are stopped at construction, on both ranks.
    try:
        GradientSynchronizer(list(TinyModel().parameters()), bucket_mib=1.0 + rank)
        results["mismatch_error"] = ""
    except LaunchError as exc:
        results["mismatch_error"] = str(exc)
    return results


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory) -> list[dict]:
    return run_ranks(_grad_sync_rank, WORLD_SIZE, tmp_path_factory.mktemp("grad_sync"))


def reference_gradients(sets: list[dict[str, torch.Tensor]], n_global: int) -> dict[str, torch.Tensor]:
    """Single-process gradient of ``Σ_sets loss_sum / n_global`` (None-gradients left out)."""
    model = TinyModel()
    loss = sum(model.loss_sum(s) for s in sets) / n_global
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def per_set_gradients(n_global: int) -> list[dict[str, torch.Tensor]]:
    return [reference_gradients([sample_set(i)], n_global) for i in range(2)]


def reference_step(sets: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Parameters after one single-process Adam step on the union of ``sets``."""
    model = TinyModel()
    n_global = sum(int(s["positions"].shape[0]) for s in sets)
    optimizer = adam(model)
    optimizer.zero_grad(set_to_none=True)
    (sum(model.loss_sum(s) for s in sets) / n_global).backward()
    optimizer.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def initial_params() -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in TinyModel().named_parameters()}


def expected_bytes(compression: str) -> int:
    """Wire bytes of one step: every gradient element plus one flag per parameter."""
    total = 0
    for p in TinyModel().parameters():
        size = {"none": p.element_size(), "fp16": 2, "bf16": 2}[compression]
        total += (p.numel() + 1) * size
    return total


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_ranks_end_with_identical_parameters(rank_results, name) -> None:
    r0, r1 = rank_results[0][name], rank_results[1][name]
    assert r0["any_gradient"] == r1["any_gradient"]
    for key, value in r0["params"].items():
        assert torch.equal(value, r1["params"][key]), f"{name}: {key} differs between ranks"


@pytest.mark.parametrize(
    "name",
    ["one_bucket", "many_buckets", "mid_buckets", "overlap_one_bucket", "overlap_many_buckets"],
)
def test_exact_sync_equals_single_process_on_the_union(rank_results, name) -> None:
    result = rank_results[0][name]
    assert result["n_global"] == sum(N_SAMPLES)
    expected_grads = reference_gradients([sample_set(0), sample_set(1)], sum(N_SAMPLES))
    assert set(result["grads"]) == set(expected_grads)
    assert "unused" not in result["grads"]  # no rank produced it: stays None as in one process
    for key, grad in expected_grads.items():
        torch.testing.assert_close(result["grads"][key], grad, rtol=1e-5, atol=1e-9)
    expected_params = reference_step([sample_set(0), sample_set(1)])
    for key, value in expected_params.items():
        torch.testing.assert_close(result["params"][key], value, rtol=1e-6, atol=1e-6)
    # The step really moved the parameters that got gradients, and only those.
    start = initial_params()
    assert torch.equal(result["params"]["unused"], start["unused"])
    for key in expected_grads:
        assert not torch.equal(result["params"][key], start[key]), f"{name}: {key} did not move"


def test_local_normalisation_would_be_detected(rank_results) -> None:
    """Guard on the test itself: normalising by the local count gives a visibly different step."""
    model = TinyModel()
    optimizer = adam(model)
    (model.loss_sum(sample_set(0)) / N_SAMPLES[0] + model.loss_sum(sample_set(1)) / N_SAMPLES[1]).backward()
    optimizer.step()
    synced = rank_results[0]["one_bucket"]["params"]
    diff = max((p.detach() - synced[n]).abs().max().item() for n, p in model.named_parameters())
    assert diff > 1e-4


@pytest.mark.parametrize(
    ("name", "unit_roundoff", "underflow"),
    [("fp16", 2.0**-11, 2.0**-25), ("bf16_overlap", 2.0**-8, 0.0)],
)
def test_compressed_sync_is_within_the_stated_bound(rank_results, name, unit_roundoff, underflow) -> None:
    """|g_c − Σ g_r| ≤ (n+1)·u·Σ|g_r| + (2n−1)·δ element-wise (grad_sync module docstring)."""
    n = WORLD_SIZE
    result = rank_results[0][name]
    g_a, g_b = per_set_gradients(sum(N_SAMPLES))
    for key in g_a:
        exact = g_a[key] + g_b[key]
        bound = (n + 1) * unit_roundoff * (g_a[key].abs() + g_b[key].abs()) + (2 * n - 1) * underflow
        error = (result["grads"][key] - exact).abs()
        assert bool((error <= bound).all()), f"{name}: {key} max error {error.max().item():.3g}"
        assert result["grads"][key].dtype == exact.dtype  # cast back from the wire dtype
    assert any(not torch.equal(result["grads"][k], g_a[k] + g_b[k]) for k in g_a)  # it did round
    # Adam's first step moves an element by lr·f(g), f(g) = g / (|g| + eps), and
    # |f'(g)| ≤ 1 / (|g| + eps); so a gradient within b of g_exact moves the update by at most
    # lr · b / (max(|g_exact| − b, 0) + eps), and never by more than 2·lr.
    start = initial_params()
    exact_params = reference_step([sample_set(0), sample_set(1)])
    for key in g_a:
        exact = g_a[key] + g_b[key]
        bound = (n + 1) * unit_roundoff * (g_a[key].abs() + g_b[key].abs()) + (2 * n - 1) * underflow
        slack = bound / ((exact.abs() - bound).clamp(min=0) + ADAM_EPS)
        allowed = LR * slack.clamp(max=2.0) + 1e-6
        moved = (result["params"][key] - exact_params[key]).abs()
        assert bool((moved <= allowed).all()), f"{name}: {key} update off by {moved.max().item():.3g}"
        # Most elements are far from cancellation: their update is within a few u·lr of exact.
        typical = (moved <= LR * 4 * (n + 1) * unit_roundoff + 1e-6).float().mean().item()
        assert typical > 0.9, f"{name}: {key}: only {typical:.0%} of updates near the exact one"
    assert torch.equal(result["params"]["unused"], start["unused"])


@pytest.mark.parametrize("name", ["rank1_empty", "rank1_empty_overlap"])
def test_rank_without_samples_still_gets_the_full_update(rank_results, name) -> None:
    for rank in range(WORLD_SIZE):
        result = rank_results[rank][name]
        assert result["n_global"] == N_SAMPLES[0]
        assert result["any_gradient"] is True
        expected = reference_gradients([sample_set(0)], N_SAMPLES[0])
        assert set(result["grads"]) == set(expected)
        for key, grad in expected.items():
            torch.testing.assert_close(result["grads"][key], grad, rtol=1e-5, atol=1e-9)
        for key, value in reference_step([sample_set(0)]).items():
            torch.testing.assert_close(result["params"][key], value, rtol=1e-6, atol=1e-6)


def test_step_without_samples_anywhere_reports_no_gradient(rank_results) -> None:
    start = initial_params()
    for rank in range(WORLD_SIZE):
        result = rank_results[rank]["all_empty"]
        assert result["any_gradient"] is False
        assert result["grads"] == {}
        for key, value in start.items():
            assert torch.equal(result["params"][key], value)


@pytest.mark.parametrize(
    ("name", "compression", "n_buckets"),
    [
        ("one_bucket", "none", 2),  # one float32 and one float64 bucket
        ("fp16", "fp16", 2),
        ("many_buckets", "none", len(list(TinyModel().parameters()))),
        ("overlap_many_buckets", "none", len(list(TinyModel().parameters()))),
    ],
)
def test_stats_count_bytes_and_buckets(rank_results, name, compression, n_buckets) -> None:
    result = rank_results[0][name]
    stats = result["stats"]
    assert stats["bytes"] == expected_bytes(compression)
    assert stats["buckets"] == n_buckets
    assert sum(result["bucket_sizes_bytes"]) == stats["bytes"]
    assert stats["comm_ms"] > 0.0


@pytest.mark.parametrize(
    ("name", "overlapped"),
    [
        # Buckets in launch order: rgb_mlp ×3, density_mlp ×2, table, unused | colour_scale.
        # "unused" never gets a gradient, so it and the float64 bucket after it wait for finish().
        ("overlap_many_buckets", (6, 6)),
        ("rank1_empty_overlap", (6, 0)),  # rank 1 runs no backward: finish() launches all
        ("overlap_one_bucket", (0, 0)),  # the float32 bucket holds "unused"
        ("many_buckets", (0, 0)),  # overlap off
    ],
)
def test_overlap_launches_buckets_during_backward(rank_results, name, overlapped) -> None:
    got = tuple(rank_results[r][name]["stats"]["overlapped_buckets"] for r in range(WORLD_SIZE))
    assert got == overlapped


def test_mid_bucket_size_splits_into_several_buckets_below_the_cap(rank_results) -> None:
    sizes = rank_results[0]["mid_buckets"]["bucket_sizes_bytes"]
    cap = 0.02 * 2**20
    table_bytes = (TinyModel().field.encoding_parameters()[0].numel() + 1) * 4
    assert 2 < len(sizes) < len(list(TinyModel().parameters()))
    assert all(size <= cap or size == table_bytes for size in sizes)


def test_ranks_with_different_settings_raise_launch_error(rank_results) -> None:
    for rank in range(WORLD_SIZE):
        assert "different parameter layouts or settings" in rank_results[rank]["mismatch_error"]


# ---------------------------------------------------------------------------- no process group


def test_bad_settings_name_the_config_key() -> None:
    params = list(TinyModel().parameters())
    with pytest.raises(ConfigError, match=r"parallel\.bucket_mib: expected a number > 0, got 0"):
        GradientSynchronizer(params, bucket_mib=0)
    with pytest.raises(ConfigError, match=r"parallel\.compression: .*got 'int8'"):
        GradientSynchronizer(params, bucket_mib=1.0, compression="int8")


def test_without_a_process_group_raises_launch_error() -> None:
    assert not dist.is_initialized()
    with pytest.raises(LaunchError, match="init_process_group"):
        GradientSynchronizer(list(TinyModel().parameters()), bucket_mib=1.0)


def test_bandwidth_follows_the_nccl_tests_convention() -> None:
    # 1e9 bytes in 1000 ms: algbw 1 GB/s; busbw = 1 · 2·(4−1)/4 = 1.5 GB/s on 4 ranks.
    assert allreduce_bandwidth_gb_per_s(10**9, 1000.0, 4) == pytest.approx((1.0, 1.5))
    assert allreduce_bandwidth_gb_per_s(2 * 10**8, 100.0, 2) == pytest.approx((2.0, 2.0))
    assert allreduce_bandwidth_gb_per_s(10**9, 1000.0, 1) == pytest.approx((1.0, 0.0))


def test_bus_factors_of_each_collective() -> None:
    # nccl-tests PERFORMANCE.md: all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, broadcast 1
    assert [bus_factor("all_reduce", n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]
    assert [bus_factor("all_gather", n) for n in (1, 2, 4, 8)] == [0.0, 0.5, 0.75, 0.875]
    assert bus_factor("reduce_scatter", 4) == 0.75 and bus_factor("broadcast", 4) == 1.0
    assert collective_bandwidth_gb_per_s("all_gather", 4 * 10**8, 100.0, 4) == pytest.approx((4.0, 3.0))
    with pytest.raises(ValueError, match=r"^bus_factor: op must be one of .*got 'all_to_all'$"):
        bus_factor("all_to_all", 2)
    with pytest.raises(ValueError, match=r"^bus_factor: world_size must be an integer >= 1, got 0$"):
        bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match=r"time_ms must be > 0, got 0.0$"):
        collective_bandwidth_gb_per_s("all_reduce", 1, 0.0, 2)

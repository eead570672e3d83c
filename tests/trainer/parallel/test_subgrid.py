"""Subgrid model parallelism: exact compositing of boxes, the distributed gather and box moves.

The distributed tests run two gloo ranks on CPU once per module (``two_rank_results``, through
``tests.support.ranks.run_ranks``) and compare everything they computed with the same boxes
evaluated in this one process.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tests.support.ranks import run_ranks
from trainer.encoding.hashgrid import HashGridConfig
from trainer.model.field import MLPConfig, NGPField
from trainer.parallel.partition import assign_boxes, ray_box_segments, split_boxes
from trainer.parallel.subgrid import (
    SubgridModel,
    all_gather_segments,
    composite_boxes_in_order,
    composite_boxes_in_order_reference,
    render_subgrid,
    segment_order,
)
from trainer.render.march import march_rays
from trainer.render.volrend import composite

AABB = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
N_RAYS = 48
OVERLAP = 0.25
SEED = 7


def _make_field(domain: torch.Tensor) -> NGPField:
    """A tiny field with a hash table spread over U(−1, 1), so density and colour vary in space."""
    field = NGPField(
        domain,
        HashGridConfig(
            n_levels=2, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4, max_resolution=16
        ),
        MLPConfig(n_neurons=16, n_hidden_layers=1),
        MLPConfig(n_neurons=16, n_hidden_layers=1),
        backend="torch",
    )
    with torch.no_grad():
        for p in field.encoding_parameters():
            p.uniform_(-1.0, 1.0)
    return field


def _rays() -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """The step's rays, aimed into the unit cube from a sphere of radius 2 (and the generator)."""
    g = torch.Generator().manual_seed(0)
    rays_o = torch.nn.functional.normalize(torch.randn(N_RAYS, 3, generator=g), dim=-1) * 2 + 0.5
    aim = torch.rand(N_RAYS, 3, generator=g)
    return rays_o, torch.nn.functional.normalize(aim - rays_o, dim=-1), g


def _scene():
    """Samples of the step's rays through the whole box, background and target colours."""
    rays_o, rays_d, g = _rays()
    samples = march_rays(rays_o, rays_d, AABB, None, step_size=1 / 32, jitter=True, generator=g)
    background = torch.rand(N_RAYS, 3, generator=g)
    target = torch.rand(N_RAYS, 3, generator=g)
    return samples, background, target


def _model(num_boxes: int, owners: list[int], rank: int) -> SubgridModel:
    boxes = split_boxes(AABB, None, num_boxes)
    return SubgridModel(boxes, owners, rank, _make_field, AABB, overlap=OVERLAP, seed=SEED)


def _loss(rgb: torch.Tensor, target: torch.Tensor, ray_share: torch.Tensor | None = None) -> torch.Tensor:
    """Squared error summed over (a share of) the rays, normalised by all rays."""
    err = ((rgb - target) ** 2).sum(-1)
    if ray_share is not None:
        err = err * ray_share
    return err.sum() / (N_RAYS * 3)


def _adam(model: SubgridModel) -> torch.optim.Adam:
    """Two parameter groups as in the trainer: hash tables without, MLP weights with L2."""
    fields = [model.fields[str(k)] for k in model.local_box_ids]
    return torch.optim.Adam(
        [
            {"params": [p for f in fields for p in f.encoding_parameters()], "weight_decay": 0.0},
            {"params": [p for f in fields for p in f.mlp_weight_parameters()], "weight_decay": 1e-6},
        ],
        lr=1e-2,
        betas=(0.9, 0.99),
        eps=1e-15,
    )


def _train_step(model, optimizer, samples, background, target, ray_share=None) -> None:
    rgb, _ = render_subgrid(model, samples, background)
    optimizer.zero_grad(set_to_none=True)
    _loss(rgb, target, ray_share).backward()
    optimizer.step()


def _field_state(model: SubgridModel, optimizer, prefix: str, out: dict) -> None:
    """Parameters and Adam state of the owned fields under ``prefix/<box>/<name>``."""
    for k in model.local_box_ids:
        for name, p in model.fields[str(k)].named_parameters():
            out[f"{prefix}/{k}/{name}"] = p.detach().clone()
            state = optimizer.state[p]
            for key in ("exp_avg", "exp_avg_sq", "step"):
                out[f"{prefix}/{k}/{name}/{key}"] = state[key].clone()


def _subgrid_rank(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    samples, background, target = _scene()
    my_rays = (torch.arange(N_RAYS) % 2 == rank).float()
    # Exactness, K = 2 (one box per rank), both gradient conventions.
    for mode, replicated in (("sum", False), ("replicated", True)):
        model = _model(2, [0, 1], rank)
        rgb, _ = render_subgrid(model, samples, background, loss_replicated=replicated)
        _loss(rgb, target, None if replicated else my_rays).backward()
        out[f"{mode}/rgb"] = rgb.detach()
        for k in model.local_box_ids:
            for name, p in model.fields[str(k)].named_parameters():
                out[f"{mode}/grad/{k}/{name}"] = p.grad
    # K = 3 on 2 ranks: uneven rows per rank (padding in the gather).
    model = _model(3, assign_boxes(3, 2), rank)
    rgb, _ = render_subgrid(model, samples, background)
    _loss(rgb, target, my_rays).backward()
    out["k3/rgb"] = rgb.detach()
    for k in model.local_box_ids:
        for name, p in model.fields[str(k)].named_parameters():
            out[f"k3/grad/{k}/{name}"] = p.grad
    # Training with box moves: step, box 1 → rank 0, step (rank 1 owns nothing), box 0 → rank 1, step.
    model = _model(2, [0, 1], rank)
    optimizer = _adam(model)
    _train_step(model, optimizer, samples, background, target, my_rays)
    if rank == 1:
        _field_state(model, optimizer, "before_move", out)
    model.move_box(1, src_rank=1, dst_rank=0, optimizer=optimizer)
    if rank == 0:
        _field_state(model, optimizer, "after_move", out)
    out["owned_after_first_move"] = torch.tensor(model.local_box_ids + [-1])
    _train_step(model, optimizer, samples, background, target, my_rays)
    model.move_box(0, src_rank=0, dst_rank=1, optimizer=optimizer)
    _train_step(model, optimizer, samples, background, target, my_rays)
    _field_state(model, optimizer, "trained", out)
    out["owners"] = torch.tensor(model.owners)
    # Inconsistent box ids (both ranks claim box 0) fail on every rank, not by a hang.
    try:
        all_gather_segments(torch.zeros(1, N_RAYS, 3), torch.ones(1, N_RAYS), [0], 2)
    except ValueError as error:
        out["bad_ids_error"] = torch.tensor(int("once each" in str(error)))
    return out


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory) -> list[dict]:
    return run_ranks(_subgrid_rank, 2, tmp_path_factory.mktemp("subgrid_ranks"))


def _reference_grads(num_boxes: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Colours and gradients of all boxes evaluated in this one process."""
    samples, background, target = _scene()
    model = _model(num_boxes, [0] * num_boxes, 0)
    rgb, _ = render_subgrid(model, samples, background)
    _loss(rgb, target).backward()
    grads = {
        f"{k}/{name}": p.grad for k in model.local_box_ids for name, p in model.fields[str(k)].named_parameters()
    }
    return rgb.detach(), grads


def _gathered(results: list[dict], prefix: str) -> dict[str, torch.Tensor]:
    merged = {}
    for result in results:
        for key, value in result.items():
            if key.startswith(prefix + "/"):
                merged[key[len(prefix) + 1 :]] = value
    return merged


# ---------------------------------------------------------------------------- distributed


@pytest.mark.parametrize("mode", ["sum", "replicated"])
def test_two_ranks_match_one_process(two_rank_results, mode):
    rgb_ref, grads_ref = _reference_grads(2)
    for result in two_rank_results:
        torch.testing.assert_close(result[f"{mode}/rgb"], rgb_ref, rtol=0, atol=1e-6)
    grads = _gathered(two_rank_results, f"{mode}/grad")
    assert sorted(grads) == sorted(grads_ref) and len(grads) == 10  # 5 parameters × 2 boxes
    for name, grad in grads_ref.items():
        assert grad.abs().max() > 0, name  # every parameter of both boxes takes part
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_two_ranks_uneven_boxes_match_one_process(two_rank_results):
    rgb_ref, grads_ref = _reference_grads(3)
    for result in two_rank_results:
        torch.testing.assert_close(result["k3/rgb"], rgb_ref, rtol=0, atol=1e-6)
    grads = _gathered(two_rank_results, "k3/grad")
    assert sorted(grads) == sorted(grads_ref)
    for name, grad in grads_ref.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_move_box_carries_parameters_and_adam_state(two_rank_results):
    before = _gathered(two_rank_results[1:], "before_move")
    after = _gathered(two_rank_results[:1], "after_move")
    moved = {key: value for key, value in after.items() if key.startswith("1/")}
    assert sorted(moved) == sorted(before) and len(before) == 5 * 4
    for key, value in before.items():
        assert torch.equal(moved[key], value), key
    assert two_rank_results[0]["owned_after_first_move"].tolist() == [0, 1, -1]
    assert two_rank_results[1]["owned_after_first_move"].tolist() == [-1]


def test_training_with_moves_matches_one_process(two_rank_results):
    samples, background, target = _scene()
    model = _model(2, [0, 0], 0)
    optimizer = _adam(model)
    for _ in range(3):
        _train_step(model, optimizer, samples, background, target)
    reference: dict[str, torch.Tensor] = {}
    _field_state(model, optimizer, "trained", reference)
    trained = _gathered(two_rank_results, "trained")
    assert sorted(trained) == sorted(key[len("trained/") :] for key in reference)
    for key, value in reference.items():
        torch.testing.assert_close(trained[key[len("trained/") :]], value, rtol=1e-5, atol=1e-7, msg=key)
    assert all(r["owners"].tolist() == [1, 0] for r in two_rank_results)
    assert "trained/1/encoding.table" in two_rank_results[0] and "trained/0/encoding.table" in two_rank_results[1]


def test_inconsistent_box_ids_raise_on_every_rank(two_rank_results):
    assert [int(r["bad_ids_error"]) for r in two_rank_results] == [1, 1]


# ---------------------------------------------------------------------------- one process


def test_composite_boxes_in_order_matches_per_ray_reference():
    g = torch.Generator().manual_seed(0)
    n_boxes, n_rays = 4, 20
    rgb = torch.rand(n_boxes, n_rays, 3, generator=g, dtype=torch.float64, requires_grad=True)
    transmittance = torch.rand(n_boxes, n_rays, generator=g, dtype=torch.float64, requires_grad=True)
    order = torch.stack([torch.randperm(n_boxes, generator=g) for _ in range(n_rays)])
    backgrounds = (
        None,
        torch.rand(3, generator=g, dtype=torch.float64),
        torch.rand(n_rays, 3, generator=g, dtype=torch.float64),
    )
    for background in backgrounds:
        fast = composite_boxes_in_order(rgb, transmittance, order, background)
        slow = composite_boxes_in_order_reference(rgb, transmittance, order, background)
        torch.testing.assert_close(fast, slow)
        weights = torch.rand(n_rays, 3, generator=g, dtype=torch.float64)
        grads_fast = torch.autograd.grad((fast[0] * weights).sum() + fast[1].sum(), (rgb, transmittance))
        grads_slow = torch.autograd.grad((slow[0] * weights).sum() + slow[1].sum(), (rgb, transmittance))
        for a, b in zip(grads_fast, grads_slow):
            torch.testing.assert_close(a, b)
    # One hand-computed ray: boxes met in order 1, 0 — C = C1 + A1·C0 + A1·A0·bg.
    c = torch.tensor([[[0.2, 0.0, 0.0]], [[0.0, 0.5, 0.0]]])
    a = torch.tensor([[0.5], [0.25]])
    rgb_1, t_1 = composite_boxes_in_order(c, a, torch.tensor([[1, 0]]), torch.tensor([0.0, 0.0, 1.0]))
    torch.testing.assert_close(rgb_1, torch.tensor([[0.05, 0.5, 0.125]]))
    torch.testing.assert_close(t_1, torch.tensor([0.125]))
    with pytest.raises(ValueError, match="permutation"):
        composite_boxes_in_order(c, a, torch.tensor([[1, 1]]))


@pytest.mark.parametrize("num_boxes", [2, 5])
def test_boxes_with_one_field_equal_plain_composite(num_boxes):
    """When every box's field is the same function, compositing segments in per-ray order equals
    compositing all samples of each ray at once (without early termination)."""
    samples, background, _ = _scene()
    shared = _make_field(AABB)
    boxes = split_boxes(AABB, None, num_boxes)
    model = SubgridModel(boxes, [0] * num_boxes, 0, lambda domain: copy.deepcopy(shared), AABB, overlap=OVERLAP)
    rgb, transmittance = render_subgrid(model, samples, background)
    sigmas, rgbs = shared(samples.positions, samples.directions)
    expected = composite(
        sigmas, rgbs, samples.dt, samples.ray_indices, N_RAYS, background, early_stop_transmittance=0.0
    )
    torch.testing.assert_close(rgb, expected.rgb, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(transmittance, expected.transmittance, rtol=1e-5, atol=1e-6)
    assert float(expected.transmittance.detach().min()) < 0.5 < float(expected.transmittance.detach().max())
    # The geometric order of ray_box_segments gives the same colours.
    sample_boxes = model.sample_boxes(samples.positions)
    local = model(samples, sample_boxes)
    rays_o, rays_d, _ = _rays()
    order = ray_box_segments(rays_o, rays_d, boxes).order
    rgb_geometric, _ = composite_boxes_in_order(local.rgb, local.transmittance, order, background)
    torch.testing.assert_close(rgb_geometric, expected.rgb, rtol=1e-5, atol=1e-6)


def test_segment_order_from_samples():
    # Ray 0 meets box 2 then 0; ray 1 only box 1; ray 2 nothing.
    t = torch.tensor([0.1, 0.2, 0.5, 0.3])
    ray_indices = torch.tensor([0, 0, 0, 1])
    sample_boxes = torch.tensor([2, 2, 0, 1])
    order = segment_order(t, ray_indices, sample_boxes, n_rays=3, n_boxes=3)
    assert order.tolist() == [[2, 0, 1], [1, 0, 2], [0, 1, 2]]


def test_overlap_does_not_change_ownership():
    samples, _, _ = _scene()
    boxes = split_boxes(AABB, None, 2)
    seen: dict[int, int] = {}

    class CountingField(torch.nn.Module):
        def __init__(self, domain):
            super().__init__()
            self.inner = _make_field(domain)
            self.box = 0 if float(domain[0, 0]) == 0.0 else 1

        def forward(self, positions, directions):
            seen[self.box] = positions.shape[0]
            return self.inner(positions, directions)

    plain = SubgridModel(boxes, [0, 0], 0, _make_field, AABB, overlap=0.0)
    wide = SubgridModel(boxes, [0, 0], 0, CountingField, AABB, overlap=0.4)
    torch.testing.assert_close(wide.encoding_domain(0), torch.tensor([[0.0, 0, 0], [0.7, 1, 1]]))
    torch.testing.assert_close(wide.encoding_domain(1), torch.tensor([[0.3, 0, 0], [1.0, 1, 1]]))
    torch.testing.assert_close(plain.encoding_domain(0), torch.tensor([[0.0, 0, 0], [0.5, 1, 1]]))
    owner = wide.sample_boxes(samples.positions)
    assert torch.equal(owner, plain.sample_boxes(samples.positions))
    x = samples.positions[:, 0]
    assert torch.equal(owner, (x >= 0.5).long())
    in_band = (x > 0.3) & (x < 0.7)  # inside both encoding domains, still owned by one box
    assert int(in_band.sum()) > 100
    wide(samples, owner)
    assert seen == {0: int((x < 0.5).sum()), 1: int((x >= 0.5).sum())}


def test_single_process_gather_reorders_and_checks_ids():
    rgb = torch.arange(2 * 3 * 3, dtype=torch.float32).reshape(2, 3, 3)
    transmittance = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    out_rgb, out_t = all_gather_segments(rgb, transmittance, [1, 0], 2)
    assert torch.equal(out_rgb, rgb.flip(0)) and torch.equal(out_t, transmittance.flip(0))
    with pytest.raises(ValueError, match="once each"):
        all_gather_segments(rgb, transmittance, [0, 0], 2)
    with pytest.raises(ValueError, match="box ids"):
        all_gather_segments(rgb, transmittance, [0], 2)


def test_density_is_owned_boxes_only_and_move_box_errors():
    boxes = split_boxes(AABB, None, 2)
    model = SubgridModel(boxes, [0, 1], 0, _make_field, AABB, overlap=OVERLAP, seed=SEED)
    full = SubgridModel(boxes, [0, 0], 0, _make_field, AABB, overlap=OVERLAP, seed=SEED)
    assert model.local_box_ids == [0] and full.local_box_ids == [0, 1]
    points = torch.rand(200, 3, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        sigma = model.density(points)
        sigma_full = full.density(points)
    left = points[:, 0] < 0.5
    assert torch.equal(sigma[~left], torch.zeros(int((~left).sum())))
    torch.testing.assert_close(sigma[left], sigma_full[left])  # same seed → same box-0 field
    assert bool((sigma_full > 0).all())
    with pytest.raises(ValueError, match="owned by rank 1, not src_rank=0"):
        model.move_box(1, src_rank=0, dst_rank=1)
    with pytest.raises(ValueError, match="box_id"):
        model.move_box(2, src_rank=0, dst_rank=1)
    model.move_box(0, src_rank=0, dst_rank=0)  # no-op
    assert model.owners == [0, 1]

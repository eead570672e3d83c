"""Subgrid model parallelism: per-box rendering and exact distributed compositing (NeRF-XL).

Reference: Li et al. 2024, *NeRF-XL: Scaling NeRFs with Multiple GPUs*, §4 eq. 5-7;
DESIGN.md §3 "Subgrid model parallel".

One step, on every rank of the group::

    samples = march_rays(rays, whole scene AABB)        identical on every rank (same rays, seed)
    box of each sample = BoxLocator.locate(positions)  exclusive: lo ≤ p < hi
    for each box k this rank owns:
        C_k, A_k = composite_segment(field_k(samples in box k))    [n, 3], [n]
    C, A = all_gather_segments(C_local, A_local, ...)  [K, n, 3], [K, n]   O(rays) bytes
    order = segment_order(samples, box of each sample)                     [n, K]
    rgb = composite_boxes_in_order(C, A, order, background)                [n, 3]

Sampling choice: every ray is marched once through the whole scene (the same lattice as the
single-process trainer) and each sample goes to the box containing its position; marching per box
inside ``[t_enter, t_exit]`` would restart the step lattice at every box face. With this choice
K = 1 is exactly the single-process renderer, and composited boxes reproduce
:func:`trainer.render.volrend.composite` of all samples (without early termination, which a
segment cannot apply since it does not know the transmittance in front of it).

Along one ray the positions are monotone in t in every coordinate (also after float rounding), so
the samples of one box are contiguous along the ray; the front-to-back order of the boxes is read
from the samples themselves (:func:`segment_order`), which is exact even for rays that graze box
edges. Boxes a ray crosses without samples have C_k = 0 and A_k = 1 and do not matter.

Only (C_k, A_k) cross the network, never parameters: gradients flow back through the gather to the
rank that rendered each segment (:func:`all_gather_segments`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

from trainer.parallel.partition import Box, BoxLocator, expand_box
from trainer.render.march import PackedSamples
from trainer.render.volrend import composite_segment, composite_segments

__all__ = [
    "LocalSegments",
    "SubgridModel",
    "all_gather_segments",
    "composite_boxes_in_order",
    "composite_boxes_in_order_reference",
    "render_subgrid",
    "segment_order",
]

#: A field as :class:`trainer.model.field.NGPField`: (positions [S, 3], directions [S, 3]) →
#: (sigma [S], rgb [S, 3]).
FieldFactory = Callable[[Tensor], nn.Module]

# Adam state entries that travel with a box (torch.optim.Adam / AdamW).
_ADAM_STATE_KEYS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
_MOVE_OK, _MOVE_UNSUPPORTED = 1, 2


def _world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank, world size) in ``group``; (0, 1) when torch.distributed is not initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


# ---------------------------------------------------------------------------- compositing


def segment_order(t: Tensor, ray_indices: Tensor, sample_boxes: Tensor, n_rays: int, n_boxes: int) -> Tensor:
    """Front-to-back order of the boxes along each ray, read from the samples.

    A box's key on a ray is the distance of its first sample there (∞ without samples); boxes are
    sorted by it (stable, so boxes without samples follow in index order).

    Args:
        t: [S] sample distances along their rays.
        ray_indices: [S] int64 ray of each sample.
        sample_boxes: [S] int64 box of each sample in ``0 .. n_boxes-1``.
        n_rays: n.
        n_boxes: K.

    Returns:
        order: [n_rays, K] int64, ``order[r, j]`` is the j-th box ray r meets.
    """
    first_t = torch.full((n_rays * n_boxes,), float("inf"), dtype=t.dtype, device=t.device)
    first_t = first_t.scatter_reduce(0, ray_indices * n_boxes + sample_boxes, t, reduce="amin")
    return torch.argsort(first_t.view(n_rays, n_boxes), dim=1, stable=True)


def _check_segments(rgb: Tensor, transmittance: Tensor, order: Tensor, where: str) -> None:
    if rgb.ndim != 3 or rgb.shape[-1] != 3 or rgb.shape[0] < 1 or transmittance.shape != rgb.shape[:2]:
        raise ValueError(
            f"{where}: expected rgb [K, n_rays, 3] and transmittance [K, n_rays] with K >= 1, "
            f"got {tuple(rgb.shape)} and {tuple(transmittance.shape)}"
        )
    n_boxes, n_rays = rgb.shape[:2]
    if order.shape != (n_rays, n_boxes) or order.dtype != torch.long:
        raise ValueError(
            f"{where}: order must be [{n_rays}, {n_boxes}] int64, got {tuple(order.shape)} {order.dtype}"
        )
    expected = torch.arange(n_boxes, device=order.device).expand(n_rays, n_boxes)
    if not torch.equal(torch.sort(order, dim=1).values, expected):
        raise ValueError(f"{where}: every row of order must be a permutation of 0..{n_boxes - 1}")


def composite_boxes_in_order(
    rgb: Tensor, transmittance: Tensor, order: Tensor, background: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Composite per-box segments, each ray in its own front-to-back box order (NeRF-XL eq. 7).

    .. math::
        C_r = \\sum_{j} \\Big(\\prod_{i<j} A_{o_{r,i}, r}\\Big) C_{o_{r,j}, r}
              + \\Big(\\prod_j A_{j, r}\\Big) · bg_r, \\quad o_{r,j} = order[r, j]

    The segments are gathered into each ray's order, then
    :func:`trainer.render.volrend.composite_segments` runs on them. Differentiable with respect
    to ``rgb`` and ``transmittance``.

    Args:
        rgb: [K, n_rays, 3] C_k per box (box index order), see :func:`composite_segment`.
        transmittance: [K, n_rays] A_k per box.
        order: [n_rays, K] int64, each row a permutation of ``0..K-1`` (:func:`segment_order` or
            :func:`trainer.parallel.partition.ray_box_segments`).
        background: [3] or [n_rays, 3] or None (black).

    Returns:
        rgb: [n_rays, 3] composited colour C.
        transmittance: [n_rays] ``Π_k A_k`` (1 − opacity).

    Raises:
        ValueError: if the shapes do not match or a row of ``order`` is not a permutation.
    """
    _check_segments(rgb, transmittance, order, "composite_boxes_in_order")
    n_boxes, n_rays = rgb.shape[:2]
    rgb_in_order = torch.gather(rgb.transpose(0, 1), 1, order.unsqueeze(-1).expand(n_rays, n_boxes, 3))
    transmittance_in_order = torch.gather(transmittance.transpose(0, 1), 1, order)
    return composite_segments(rgb_in_order.transpose(0, 1), transmittance_in_order.transpose(0, 1), background)


def composite_boxes_in_order_reference(
    rgb: Tensor, transmittance: Tensor, order: Tensor, background: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Slow twin of :func:`composite_boxes_in_order`: a Python loop over rays and boxes (tests).

    Per ray: ``T = 1``, ``C = 0``; for each box k in the ray's order: ``C += T·C_k``,
    ``T *= A_k``; finally ``C += T·bg``. Same arguments and results; differentiable.
    """
    _check_segments(rgb, transmittance, order, "composite_boxes_in_order_reference")
    n_rays = rgb.shape[1]
    if background is not None and background.shape == (3,):
        background = background.expand(n_rays, 3)
    colours, throughputs = [], []
    for ray in range(n_rays):
        through = torch.ones((), dtype=rgb.dtype, device=rgb.device)
        colour = torch.zeros(3, dtype=rgb.dtype, device=rgb.device)
        for box in order[ray].tolist():
            colour = colour + through * rgb[box, ray]
            through = through * transmittance[box, ray]
        if background is not None:
            colour = colour + through * background[ray]
        colours.append(colour)
        throughputs.append(through)
    return torch.stack(colours), torch.stack(throughputs)


# ---------------------------------------------------------------------------- all-gather


class _AllGatherSegments(torch.autograd.Function):
    """All-gather of per-box rows [K_local, n, 4] into [K, n, 4] with a gradient back to the owner.

    Backward: ``"sum"`` all-reduces the [K, n, 4] gradient (the derivative of Σ_ranks loss_rank)
    and keeps the own rows; ``"replicated"`` keeps the own rows of the local gradient with no
    communication (valid when every rank computes the same loss from the gathered rows).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        packed_local: Tensor,
        anchor: Tensor,
        rows_of_box: Tensor,
        local_box_ids: Tensor,
        rows_per_rank: int,
        group: dist.ProcessGroup | None,
        loss_replicated: bool,
    ) -> Tensor:
        del anchor  # only makes the output require grad on a rank that owns no box
        world = dist.get_world_size(group)
        padded = packed_local.new_zeros((rows_per_rank, *packed_local.shape[1:]))
        padded[: packed_local.shape[0]] = packed_local
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=group)
        ctx.group = group
        ctx.loss_replicated = loss_replicated
        ctx.save_for_backward(local_box_ids)
        return torch.cat(gathered)[rows_of_box]

    @staticmethod
    def backward(ctx, grad_packed: Tensor):  # type: ignore[override]
        (local_box_ids,) = ctx.saved_tensors
        grad = grad_packed.contiguous()
        if not ctx.loss_replicated:
            grad = grad.clone()
            dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad[local_box_ids], None, None, None, None, None, None


def all_gather_segments(
    rgb_local: Tensor,
    transmittance_local: Tensor,
    box_ids_local: Sequence[int] | Tensor,
    n_boxes: int,
    group: dist.ProcessGroup | None = None,
    *,
    loss_replicated: bool = False,
) -> tuple[Tensor, Tensor]:
    """Autograd-aware all-gather of every rank's box segments into all K boxes (NeRF-XL §4).

    Collective: every rank of ``group`` calls it with the same ``n_boxes`` and rays, and — when
    gradients are wanted — calls backward through its result. Two collectives in the forward (the
    box ids, K + 1 int64; the segments, W·max(K_local)·n·4 floats) and, with
    ``loss_replicated=False``, one all-reduce of K·n·4 floats in the backward: O(rays) bytes,
    independent of the model size. Each is bounded by the group's timeout
    (``distributed.timeout_s`` given to ``init_process_group``). With torch.distributed not
    initialised or a group of one rank it only reorders the rows.

    Gradients:
        * ``loss_replicated=False`` (default, the autograd of an all-gather): a rank's segments get
          ``Σ_ranks ∂loss_rank/∂(C_k, A_k)`` — each rank computes the loss of its own share of the
          rays (or the same loss divided by the world size).
        * ``loss_replicated=True``: every rank computes the *same* loss from the gathered segments
          (all rays); a rank's segments get its own local gradient and the backward needs no
          communication. Using it with per-rank losses gives wrong gradients.

    (``torch.distributed.nn.functional.all_gather`` works with gloo on torch 2.13 but is
    deprecated there, needs equal shapes on every rank and has only the first semantics.)

    Args:
        rgb_local: [K_local, n_rays, 3] float C_k of this rank's boxes (K_local may be 0).
        transmittance_local: [K_local, n_rays] A_k.
        box_ids_local: K_local distinct box indices, row i of the inputs is box ``box_ids_local[i]``.
        n_boxes: K, total number of boxes; the ids of all ranks together are ``0 .. K-1``.
        group: process group (None = the default group).
        loss_replicated: see above; must be the same on every rank.

    Returns:
        rgb: [K, n_rays, 3] in box index order; transmittance: [K, n_rays].

    Raises:
        ValueError: on every rank alike, if the ranks' box ids are not a partition of ``0..K-1`` or
            their ray counts differ; locally for malformed shapes.
    """
    if rgb_local.ndim != 3 or rgb_local.shape[-1] != 3 or transmittance_local.shape != rgb_local.shape[:2]:
        raise ValueError(
            "all_gather_segments: expected rgb_local [K_local, n_rays, 3] and transmittance_local "
            f"[K_local, n_rays], got {tuple(rgb_local.shape)} and {tuple(transmittance_local.shape)}"
        )
    device = rgb_local.device
    ids = torch.as_tensor(box_ids_local, dtype=torch.long).flatten().to(device)
    if ids.numel() != rgb_local.shape[0] or ids.numel() > n_boxes:
        raise ValueError(
            f"all_gather_segments: {ids.numel()} box ids for {rgb_local.shape[0]} segment rows "
            f"and {n_boxes} boxes"
        )
    n_rays = rgb_local.shape[1]
    packed_local = torch.cat((rgb_local, transmittance_local.unsqueeze(-1).to(rgb_local.dtype)), dim=-1)
    _, world = _world(group)

    if world == 1:
        _check_box_partition([ids.tolist()], [n_rays], n_boxes)
        packed = packed_local[torch.argsort(ids)]
        return packed[..., :3], packed[..., 3]

    header = torch.full((n_boxes + 1,), -1, dtype=torch.long, device=device)
    header[0] = n_rays
    header[1 : 1 + ids.numel()] = ids
    headers = [torch.empty_like(header) for _ in range(world)]
    dist.all_gather(headers, header, group=group)
    ids_per_rank = [[int(i) for i in h[1:].tolist() if i >= 0] for h in headers]
    _check_box_partition(ids_per_rank, [int(h[0]) for h in headers], n_boxes)

    rows_per_rank = max(1, max(len(r) for r in ids_per_rank))
    rows_of_box = torch.empty(n_boxes, dtype=torch.long)
    for rank, rank_ids in enumerate(ids_per_rank):
        for slot, box in enumerate(rank_ids):
            rows_of_box[box] = rank * rows_per_rank + slot
    anchor = torch.empty(0, device=device, requires_grad=torch.is_grad_enabled())
    packed = _AllGatherSegments.apply(
        packed_local, anchor, rows_of_box.to(device), ids, rows_per_rank, group, loss_replicated
    )
    return packed[..., :3], packed[..., 3]


def _check_box_partition(ids_per_rank: list[list[int]], rays_per_rank: list[int], n_boxes: int) -> None:
    every = sorted(box for rank_ids in ids_per_rank for box in rank_ids)
    if every != list(range(n_boxes)):
        raise ValueError(
            f"all_gather_segments: the ranks' box ids must together be 0..{n_boxes - 1} once each, "
            f"got {ids_per_rank}"
        )
    if len(set(rays_per_rank)) != 1:
        raise ValueError(
            f"all_gather_segments: every rank must render the same rays, got n_rays per rank {rays_per_rank}"
        )


# ---------------------------------------------------------------------------- model


class LocalSegments(NamedTuple):
    """This rank's segments (:meth:`SubgridModel.forward`).

    Attributes:
        rgb: [K_local, n_rays, 3] float32 C_k.
        transmittance: [K_local, n_rays] float32 A_k.
        box_ids: [K_local] int64, box of each row (ascending).
    """

    rgb: Tensor
    transmittance: Tensor
    box_ids: Tensor


class SubgridModel(nn.Module):
    """The fields of the boxes one rank owns, and the moves of boxes between ranks.

    Every rank builds it with the same ``boxes`` and ``owners``; it creates the fields of its own
    boxes only, each over its encoding domain (the box enlarged by ``overlap``,
    :func:`~trainer.parallel.partition.expand_box`). Samples are owned by the un-enlarged boxes
    (:class:`~trainer.parallel.partition.BoxLocator`).

    Args:
        boxes: the K boxes tiling the scene AABB (:func:`~trainer.parallel.partition.split_boxes`).
        owners: [K] owner rank of each box in ``group`` (:func:`~trainer.parallel.partition.assign_boxes`).
        rank: this process's rank in ``group``.
        field_factory: builds a box's field from its encoding domain, a [2, 3] float32 tensor on
            ``device``; the field maps (positions [S, 3], directions [S, 3]) to (sigma [S],
            rgb [S, 3]), e.g. ``lambda domain: build_field(cfg, domain, aabb_scale, device)``. Must
            build the same architecture on every rank (:meth:`move_box` relies on it).
        aabb: [2, 3] the scene box (clips the encoding domains).
        overlap: ``parallel.overlap`` in [0, 0.5].
        group: process group (None = the default group).
        device: where the encoding domains (and so the fields) live.
        seed: when given, box k's field is built with the random generators seeded to
            ``seed + k`` (restored afterwards), so its initial parameters do not depend on the
            world size or on which rank owns it; None uses the global generators as they are.

    Attributes:
        fields: ``nn.ModuleDict`` of the owned fields keyed by ``str(box index)``.
        owners: list of the owner rank of each box (kept equal on all ranks by :meth:`move_box`).

    Raises:
        ConfigError: for an ``overlap`` outside [0, 0.5].
        ValueError: if ``owners`` does not have one rank in ``0..`` per box, or the boxes do not
            tile their bounding box.
    """

    def __init__(
        self,
        boxes: Sequence[Box],
        owners: Sequence[int],
        rank: int,
        field_factory: FieldFactory,
        aabb: Tensor,
        *,
        overlap: float = 0.0,
        group: dist.ProcessGroup | None = None,
        device: torch.device | str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        bad_rank = any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in owners)
        if len(owners) != len(boxes) or bad_rank:
            raise ValueError(
                f"SubgridModel: owners must give one rank >= 0 per box ({len(boxes)}), got {list(owners)}"
            )
        self.boxes = list(boxes)
        self.owners = list(owners)
        self.rank = rank
        self.group = group
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.field_factory = field_factory
        self.seed = seed
        self.locator = BoxLocator(self.boxes)
        self.domains = [torch.stack(expand_box(b, overlap, aabb)).float() for b in self.boxes]
        self.fields = nn.ModuleDict(
            {str(k): self._build_field(k) for k in range(len(self.boxes)) if self.owners[k] == rank}
        )

    @property
    def n_boxes(self) -> int:
        """K."""
        return len(self.boxes)

    @property
    def local_box_ids(self) -> list[int]:
        """Indices of the boxes this rank owns, ascending."""
        return sorted(int(k) for k in self.fields.keys())

    def encoding_domain(self, box_id: int) -> Tensor:
        """[2, 3] float32 (CPU): the domain box ``box_id``'s field normalises positions by."""
        return self.domains[box_id].clone()

    def _build_field(self, box_id: int) -> nn.Module:
        domain = self.domains[box_id].to(self.device)
        if self.seed is None:
            return self.field_factory(domain)
        cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda_devices):
            torch.manual_seed(self.seed + box_id)
            return self.field_factory(domain)

    def sample_boxes(self, positions: Tensor) -> Tensor:
        """[S] int64 box owning each of ``positions`` [S, 3] (see :class:`BoxLocator`)."""
        return self.locator.locate(positions)

    def forward(self, samples: PackedSamples, sample_boxes: Tensor | None = None) -> LocalSegments:
        """Render this rank's segments of every ray.

        For each owned box k (ascending): the samples whose position lies in box k are evaluated by
        its field and composited with :func:`~trainer.render.volrend.composite_segment`
        (transmittance restarted at the box entry, no background, no early termination).

        Args:
            samples: the step's samples, marched through the whole scene (same on every rank).
            sample_boxes: [S] int64 box of each sample, or None to locate them here.

        Returns:
            :class:`LocalSegments` (rgb [K_local, n, 3], transmittance [K_local, n] float32,
            box_ids [K_local]); K_local = 0 gives empty tensors.
        """
        if sample_boxes is None:
            sample_boxes = self.sample_boxes(samples.positions)
        n_rays = samples.n_rays
        device = samples.positions.device
        rows_rgb, rows_transmittance = [], []
        box_ids = self.local_box_ids
        for k in box_ids:
            mine = (sample_boxes == k).nonzero().squeeze(-1)
            sigmas, rgbs = self.fields[str(k)](samples.positions[mine], samples.directions[mine])
            rgb_k, transmittance_k = composite_segment(
                sigmas.float(), rgbs.float(), samples.dt[mine].float(), samples.ray_indices[mine], n_rays
            )
            rows_rgb.append(rgb_k)
            rows_transmittance.append(transmittance_k)
        if not box_ids:
            return LocalSegments(
                torch.zeros(0, n_rays, 3, device=device),
                torch.zeros(0, n_rays, device=device),
                torch.zeros(0, dtype=torch.long, device=device),
            )
        return LocalSegments(
            torch.stack(rows_rgb), torch.stack(rows_transmittance), torch.tensor(box_ids, device=device)
        )

    def density(self, positions: Tensor) -> Tensor:
        """Density from this rank's fields, for the occupancy-grid update.

        Args:
            positions: [S, 3] float world positions.

        Returns:
            [S] float32 σ (1/world units) at the points in owned boxes, 0 elsewhere; summed over
            the ranks of the group (all-reduce) it is the density of the whole scene.
        """
        sample_boxes = self.sample_boxes(positions)
        sigma = torch.zeros(positions.shape[0], dtype=torch.float32, device=positions.device)
        for k in self.local_box_ids:
            mine = (sample_boxes == k).nonzero().squeeze(-1)
            field = self.fields[str(k)]
            sigma[mine] = field.density(positions[mine]).float()
        return sigma

    # ------------------------------------------------------------------ moving boxes

    def move_box(
        self, box_id: int, src_rank: int, dst_rank: int, optimizer: torch.optim.Optimizer | None = None
    ) -> None:
        """Move box ``box_id``'s field and its optimiser state from ``src_rank`` to ``dst_rank``.

        Called by every rank of the group with the same arguments (others only update
        :attr:`owners`). ``src_rank`` sends with point-to-point messages (bounded by the group's
        timeout): a header, every tensor of the field's ``state_dict`` and, per parameter, the Adam
        state (``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq`` where present, ``step``) with the
        index of its parameter group. ``dst_rank`` builds the field with ``field_factory``, loads
        what it received, appends the parameters to the same parameter groups of its optimiser and
        sets their state; ``src_rank`` drops the field and removes its parameters and state from
        its optimiser. The optimisers of all ranks must have the same parameter-group layout (as
        built by the same code). Parameters on a rank without an optimiser travel without state.

        Args:
            box_id: the box to move.
            src_rank: its current owner (rank in the group).
            dst_rank: the new owner.
            optimizer: this rank's optimiser over its fields (Adam/AdamW), or None.

        Raises:
            ValueError: on every rank alike, if ``box_id`` is out of range or ``src_rank`` does not
                own it; on both ``src_rank`` and ``dst_rank`` if the source optimiser holds state
                other than Adam's for the box.
        """
        if not 0 <= box_id < self.n_boxes:
            raise ValueError(f"SubgridModel.move_box: box_id must be in 0..{self.n_boxes - 1}, got {box_id}")
        if self.owners[box_id] != src_rank:
            raise ValueError(
                f"SubgridModel.move_box: box {box_id} is owned by rank {self.owners[box_id]}, "
                f"not src_rank={src_rank}"
            )
        if src_rank == dst_rank:
            return
        if self.rank == src_rank:
            self._send_box(box_id, dst_rank, optimizer)
        elif self.rank == dst_rank:
            self._receive_box(box_id, src_rank, optimizer)
        self.owners[box_id] = dst_rank

    def _peer(self, group_rank: int) -> int:
        """Global rank of ``group_rank`` (send/recv take global ranks)."""
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def _send_box(self, box_id: int, dst_rank: int, optimizer: torch.optim.Optimizer | None) -> None:
        field = self.fields[str(box_id)]
        params = list(field.parameters())
        device = params[0].device
        group_of = _param_group_index(optimizer, params)
        states = [optimizer.state.get(p, {}) if optimizer is not None else {} for p in params]
        unsupported = [sorted(set(s) - {"step", *_ADAM_STATE_KEYS}) for s in states]
        status = _MOVE_UNSUPPORTED if any(unsupported) else _MOVE_OK
        header = [status, len(params)]
        for p, state in zip(params, states):
            mask = sum(1 << i for i, key in enumerate(_ADAM_STATE_KEYS) if key in state)
            header += [group_of[id(p)], mask, int("step" in state)]
        peer = self._peer(dst_rank)
        dist.send(torch.tensor(header, dtype=torch.long, device=device), peer, group=self.group)
        if status != _MOVE_OK:
            keys = sorted({key for keys in unsupported for key in keys})
            raise ValueError(
                f"SubgridModel.move_box: box {box_id}: optimiser state {keys} cannot be moved "
                "(only Adam's step, exp_avg, exp_avg_sq, max_exp_avg_sq)"
            )
        with torch.no_grad():
            for tensor in field.state_dict().values():
                dist.send(tensor.contiguous(), peer, group=self.group)
            steps = torch.tensor([float(s.get("step", 0.0)) for s in states], dtype=torch.float64, device=device)
            dist.send(steps, peer, group=self.group)
            for state in states:
                for key in _ADAM_STATE_KEYS:
                    if key in state:
                        dist.send(state[key].contiguous(), peer, group=self.group)
        if optimizer is not None:
            ids = {id(p) for p in params}
            for param_group in optimizer.param_groups:
                param_group["params"] = [q for q in param_group["params"] if id(q) not in ids]
            for p in params:
                optimizer.state.pop(p, None)
        del self.fields[str(box_id)]

    def _receive_box(self, box_id: int, src_rank: int, optimizer: torch.optim.Optimizer | None) -> None:
        field = self._build_field(box_id)
        params = list(field.parameters())
        device = params[0].device
        peer = self._peer(src_rank)
        header = torch.empty(2 + 3 * len(params), dtype=torch.long, device=device)
        dist.recv(header, peer, group=self.group)
        header_list = header.tolist()
        if header_list[0] != _MOVE_OK:
            raise ValueError(
                f"SubgridModel.move_box: box {box_id}: rank {src_rank} holds optimiser state that cannot be "
                "moved (only Adam's step, exp_avg, exp_avg_sq, max_exp_avg_sq)"
            )
        assert header_list[1] == len(params), "field_factory builds different fields on different ranks"
        with torch.no_grad():
            for tensor in field.state_dict().values():
                buffer = torch.empty_like(tensor, memory_format=torch.contiguous_format)
                dist.recv(buffer, peer, group=self.group)
                tensor.copy_(buffer)
            steps = torch.empty(len(params), dtype=torch.float64, device=device)
            dist.recv(steps, peer, group=self.group)
            new_states = []
            for i, p in enumerate(params):
                mask = header_list[3 + 3 * i]
                state: dict[str, Tensor] = {}
                for bit, key in enumerate(_ADAM_STATE_KEYS):
                    if mask >> bit & 1:
                        state[key] = torch.empty_like(p, memory_format=torch.contiguous_format)
                        dist.recv(state[key], peer, group=self.group)
                new_states.append(state)
        self.fields[str(box_id)] = field
        if optimizer is None:
            return
        for i, (p, state) in enumerate(zip(params, new_states)):
            param_group = optimizer.param_groups[header_list[2 + 3 * i]]
            param_group["params"].append(p)
            if header_list[4 + 3 * i]:
                on_device = bool(param_group.get("capturable")) or bool(param_group.get("fused"))
                step_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
                state["step"] = torch.tensor(
                    float(steps[i]), dtype=step_dtype, device=p.device if on_device else torch.device("cpu")
                )
            if state:
                optimizer.state[p] = state


def _param_group_index(optimizer: torch.optim.Optimizer | None, params: list[Tensor]) -> dict[int, int]:
    """id(param) → index of the optimiser's parameter group holding it (0 without optimiser).

    Raises:
        ValueError: if the optimiser does not hold one of ``params``.
    """
    if optimizer is None:
        return {id(p): 0 for p in params}
    where = {id(q): g for g, param_group in enumerate(optimizer.param_groups) for q in param_group["params"]}
    missing = [i for i, p in enumerate(params) if id(p) not in where]
    if missing:
        raise ValueError(
            f"SubgridModel.move_box: the optimiser does not hold parameters {missing} of the box's field"
        )
    return {id(p): where[id(p)] for p in params}


def render_subgrid(
    model: SubgridModel,
    samples: PackedSamples,
    background: Tensor | None = None,
    *,
    loss_replicated: bool = False,
) -> tuple[Tensor, Tensor]:
    """Render the step's rays with the boxes of every rank (the whole pipeline of the module
    docstring). Collective over ``model.group``.

    Args:
        model: this rank's :class:`SubgridModel`.
        samples: the step's samples through the whole scene, identical on every rank.
        background: [3] or [n_rays, 3] or None (black).
        loss_replicated: see :func:`all_gather_segments`.

    Returns:
        rgb: [n_rays, 3] float32 composited colour; transmittance: [n_rays] left after all boxes.
    """
    sample_boxes = model.sample_boxes(samples.positions)
    local = model(samples, sample_boxes)
    rgb_k, transmittance_k = all_gather_segments(
        local.rgb, local.transmittance, local.box_ids, model.n_boxes, model.group, loss_replicated=loss_replicated
    )
    order = segment_order(samples.t, samples.ray_indices, sample_boxes, samples.n_rays, model.n_boxes)
    return composite_boxes_in_order(rgb_k, transmittance_k, order, background)

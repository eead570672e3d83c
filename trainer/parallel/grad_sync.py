"""Data-parallel gradient synchronisation: bucketed all-reduce, compression, overlap (DESIGN.md §3).

Every rank holds the whole model and trains on its own rays; after backward the gradients are
summed over ranks so that every rank applies the same update.

Loss normalisation contract
---------------------------
The gradients are **summed**, not averaged. For the summed update to equal the single-process
update on the union of all ranks' rays, each rank normalises its loss by the *global* count::

    loss_r = (Σ_{rays i of rank r} ℓ_i) / N_global,     N_global = Σ_r n_r

so ``Σ_r ∇loss_r = ∇ (Σ_all i ℓ_i / N_global)``, the single-process gradient of the mean loss.
Normalising by the local count ``n_r`` instead would weight a rank's rays by ``1/n_r``, which is
wrong whenever the shares differ (load balancing) or a rank has no rays. The single-process
trainer divides the summed photometric loss by ``n_rays · 3`` (3 colour channels); the data-parallel
trainer divides by ``N_global · 3``. ``N_global`` comes from the load balancer's integer split
(known on every rank without communication) or from :func:`global_count` (one all-reduce).

Uneven work never deadlocks: every rank runs the same collectives in the same order each step,
whatever its work. A parameter without a gradient on this rank (no samples this step, or unused)
sends zeros, and a parameter that got no gradient on *any* rank keeps ``grad = None`` as it would in
a single process on the union of the rays (so Adam skips it). :meth:`GradientSynchronizer.finish`
returns False when no rank produced any gradient; the caller then skips the optimiser step on all
ranks alike, as the single-process loop does for a step without samples.

Compression trade-off
---------------------
``compression = "fp16"`` or ``"bf16"`` casts each bucket to 16 bits before the all-reduce and back
after, halving the bytes on the wire. The sum is computed in the 16-bit type (gloo and NCCL reduce in
the wire dtype), so with ``n`` ranks the reduced value carries a relative error of about
``n · u`` per element, ``u`` the unit roundoff:

* fp16: ``u = 2^-11 ≈ 4.9e-4``; range: magnitudes below 6.1e-5 lose precision (subnormals) and
  below 6.0e-8 flush to zero; above 65504 overflow to inf. Small hash-grid gradients (normalised by a
  large global ray count) can underflow unless the loss is scaled (fp16 training precision's
  ``GradScaler`` scales the loss before backward; an overflow then shows up as inf and the scaler
  skips the step).
* bf16: ``u = 2^-8 ≈ 3.9e-3``, float32's range (no underflow/overflow problem), coarser rounding.

Bound checked by the tests, element-wise with ``g_r`` the rank gradients and ``u`` as above::

    |g_compressed − Σ_r g_r| ≤ (n + 1) · u · Σ_r |g_r| + (2n − 1) · δ

(n roundings when casting, n − 1 in the sum, with a margin of one; ``δ = 2^-25 ≈ 3e-8`` is half of
fp16's smallest subnormal; negligible for bf16, which has float32's range). Adam divides by ``√v``, so a relative
gradient error of a few ``u`` changes an update by a few ``u · lr``; elements whose gradient is
near zero can change sign (Adam's first step moves every element by about ``±lr``).

Overlap
-------
With ``overlap = True`` each parameter gets a post-accumulate-grad hook
(``Tensor.register_post_accumulate_grad_hook``). When the last gradient of a bucket is ready and
every earlier bucket has been launched, the bucket's asynchronous all-reduce starts while the rest of
backward runs (on NCCL this overlaps communication with computation; on gloo it runs on gloo's
threads). Buckets are launched strictly in index order on every rank, so collectives match across
ranks even when backward produces gradients in a different order. Buckets are filled in reverse
parameter order (the order backward usually produces them, as in PyTorch DDP).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer.contract.errors import ConfigError, LaunchError
from trainer.train.timing import DeviceClock

__all__ = [
    "COMPRESSION_DTYPES",
    "GradientSynchronizer",
    "allreduce_bandwidth_gb_per_s",
    "bus_factor",
    "collective_bandwidth_gb_per_s",
    "collective_device",
    "global_count",
]

COMPRESSION_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
"""``parallel.compression`` value → dtype on the wire (None: the gradient's own dtype)."""

MIB = 2**20


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """The device small collective tensors must live on: the current CUDA device for NCCL, else CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _require_initialised() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise LaunchError(
            "gradient synchronisation needs an initialised torch.distributed process group "
            "(call init_process_group first)"
        )


def global_count(local_count: int, group: dist.ProcessGroup | None = None) -> int:
    """Sum of a per-rank count over all ranks (e.g. rays this step), for the loss normaliser.

    One blocking all-reduce of an int64 scalar (a host sync on CUDA). Every rank must take part.

    Args:
        local_count: this rank's count (>= 0).
        group: process group (default: the world).

    Returns:
        ``Σ_r local_count_r`` on every rank.

    Raises:
        LaunchError: if no process group is initialised.
    """
    _require_initialised()
    assert local_count >= 0, local_count
    count = torch.tensor([int(local_count)], dtype=torch.int64, device=collective_device(group))
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    return int(count.item())


def bus_factor(op: str, world_size: int) -> float:
    """busbw / algbw of a collective on ``world_size`` ranks (nccl-tests ``PERFORMANCE.md``).

    ``all_reduce``: ``2(n − 1)/n``; ``all_gather`` and ``reduce_scatter``: ``(n − 1)/n`` (with the
    bytes of the whole output, resp. input); ``broadcast``: 1.

    Raises:
        ValueError: for another ``op`` or ``world_size`` < 1.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"bus_factor: world_size must be an integer >= 1, got {world_size!r}")
    n = world_size
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n, "broadcast": 1.0}
    if op not in factors:
        raise ValueError(f"bus_factor: op must be one of {', '.join(factors)}, got {op!r}")
    return factors[op]


def collective_bandwidth_gb_per_s(op: str, size_bytes: int, time_ms: float, world_size: int) -> tuple[float, float]:
    """Algorithm and bus bandwidth of a collective, nccl-tests convention (``PERFORMANCE.md``).

    ``algbw = size_bytes / time``; ``busbw = algbw · bus_factor(op, n)`` (:func:`bus_factor`), the
    bandwidth each link must carry, comparable across world sizes and with the link's peak. GB is
    10^9 bytes as in nccl-tests. ``size_bytes`` is the buffer of one rank for all-reduce and
    broadcast, the whole output of all-gather (every rank's part together), the whole input of
    reduce-scatter.

    Args:
        op: ``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``broadcast``.
        size_bytes: bytes as above (>= 0).
        time_ms: duration of one collective, ms (> 0).
        world_size: number of ranks n (>= 1).

    Returns:
        ``(algbw_gb_per_s, busbw_gb_per_s)``.

    Raises:
        ValueError: for an unknown ``op``, ``world_size`` < 1 or ``time_ms`` <= 0.

    Example:
        >>> collective_bandwidth_gb_per_s("all_reduce", 10**9, 1000.0, 4)
        (1.0, 1.5)
    """
    if not time_ms > 0:
        raise ValueError(f"collective_bandwidth_gb_per_s: time_ms must be > 0, got {time_ms!r}")
    factor = bus_factor(op, world_size)
    algbw = size_bytes / (time_ms * 1e-3) / 1e9
    return algbw, algbw * factor


def allreduce_bandwidth_gb_per_s(
    bytes_reduced: int, time_ms: float, world_size: int
) -> tuple[float, float]:
    """Algorithm and bus bandwidth of an all-reduce (:func:`collective_bandwidth_gb_per_s` with
    ``op="all_reduce"``: ``busbw = algbw · 2(n − 1)/n``). Use a non-overlapped time: with
    ``overlap = True`` :meth:`GradientSynchronizer.stats` reports only the exposed wait, which
    overstates the bandwidth.

    Args:
        bytes_reduced: buffer size in bytes (per rank).
        time_ms: duration of the all-reduce in milliseconds (> 0).
        world_size: number of ranks n (>= 1).

    Returns:
        ``(algbw_gb_per_s, busbw_gb_per_s)``.
    """
    return collective_bandwidth_gb_per_s("all_reduce", bytes_reduced, time_ms, world_size)


@dataclasses.dataclass
class _Bucket:
    """Parameters whose gradients travel in one all-reduce.

    Buffer layout (wire dtype): ``[grad_0 | grad_1 | ... | flag_0 .. flag_{k-1}]`` where
    ``flag_j`` is 1 on a rank that has a gradient for parameter j, so after the sum it counts the
    ranks that contributed.
    """

    index: int
    params: list[nn.Parameter]
    offsets: list[int]  # start of each parameter's gradient in the buffer, elements
    numel: int  # gradient elements (flags follow)
    wire_dtype: torch.dtype
    device: torch.device
    buffer: torch.Tensor | None = None
    pending: int = 0  # parameters whose gradient is not yet ready this step (overlap mode)
    ready: list[bool] = dataclasses.field(default_factory=list)
    local_has_grad: list[bool] = dataclasses.field(default_factory=list)
    work: Any = None  # the async all-reduce handle once launched

    @property
    def nbytes(self) -> int:
        return (self.numel + len(self.params)) * _element_size(self.wire_dtype)

    def reset(self) -> None:
        self.pending = len(self.params)
        self.ready = [False] * len(self.params)
        self.local_has_grad = [False] * len(self.params)
        self.work = None


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class GradientSynchronizer:
    """Sums parameter gradients over the ranks of a process group, in buckets.

    Use once per step, after backward and before the optimiser step::

        sync = GradientSynchronizer(list(model.parameters()), bucket_mib=25,
                                    compression="none", overlap=True)
        ...
        optimizer.zero_grad(set_to_none=True)
        (loss_sum / n_global).backward()      # or no backward at all on a rank without samples
        if sync.finish():                      # all ranks get the same answer
            optimizer.step()

    With fp16 precision call :meth:`finish` between ``scaler.scale(loss).backward()`` and
    ``scaler.step(optimizer)``: the scaled gradients are summed, then the scaler unscales them and
    skips the step on every rank alike if the sum overflowed.

    Every rank must construct it with the same parameter list (same order, shapes, dtypes) and
    the same settings, and call :meth:`finish` every step. One backward per step: with overlap,
    a second backward between two :meth:`finish` calls into an already launched bucket is a
    programmer error (AssertionError).

    Args:
        params: the parameters to synchronise (those with ``requires_grad``; duplicates ignored).
            Gradients must be dense.
        bucket_mib: target bucket size on the wire, MiB (> 0); a parameter larger than it gets a
            bucket of its own. 1 MiB = 2^20 bytes.
        compression: ``"none"``, ``"fp16"`` or ``"bf16"`` (see the module docstring for accuracy).
        overlap: launch each bucket's all-reduce from post-accumulate-grad hooks during backward.
        group: process group (default: the world).

    Raises:
        ConfigError: ``parallel.bucket_mib`` or ``parallel.compression`` invalid (names the value).
        LaunchError: no process group is initialised, or the ranks hold different parameter
            layouts or settings (checked with one all-reduce at construction).
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        *,
        bucket_mib: float,
        compression: str = "none",
        overlap: bool = False,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        if isinstance(bucket_mib, bool) or not isinstance(bucket_mib, (int, float)) or not (
            bucket_mib > 0 and bucket_mib != float("inf")
        ):
            raise ConfigError(f"parallel.bucket_mib: expected a number > 0, got {bucket_mib!r}")
        if compression not in COMPRESSION_DTYPES:
            raise ConfigError(
                f"parallel.compression: expected one of {', '.join(COMPRESSION_DTYPES)}, "
                f"got {compression!r}"
            )
        _require_initialised()
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.compression = compression
        self.overlap = bool(overlap)
        self.bucket_bytes = int(bucket_mib * MIB)
        seen: set[int] = set()
        unique = []
        for p in params:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                unique.append(p)
        assert unique, "GradientSynchronizer needs at least one parameter with requires_grad"
        self.params = unique
        self.buckets = self._build_buckets(unique)
        self._slot = {id(p): (b.index, j) for b in self.buckets for j, p in enumerate(b.params)}
        self._check_same_layout()
        self._device = unique[0].device
        self._timer: DeviceClock | None = None  # the wait of the last finish()
        self._hooks = []
        if self.overlap:
            for p in unique:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad_ready))
        self._next_launch = 0
        self._bytes = 0
        self._last: dict[str, Any] = {"bytes": 0, "buckets": 0, "overlapped_buckets": 0}
        for bucket in self.buckets:
            bucket.reset()

    # ------------------------------------------------------------------ layout
    def _wire_dtype(self, dtype: torch.dtype) -> torch.dtype:
        wire = COMPRESSION_DTYPES[self.compression]
        return dtype if wire is None else wire

    def _build_buckets(self, params: list[nn.Parameter]) -> list[_Bucket]:
        """Reverse parameter order, one open bucket per (dtype, device); closed when full."""
        buckets: list[_Bucket] = []
        open_: dict[tuple[torch.dtype, torch.device], _Bucket] = {}

        def close(key: tuple[torch.dtype, torch.device]) -> None:
            bucket = open_.pop(key)
            bucket.index = len(buckets)
            buckets.append(bucket)

        for p in reversed(params):
            assert p.layout == torch.strided, "GradientSynchronizer supports dense parameters only"
            key = (p.dtype, p.device)
            wire = self._wire_dtype(p.dtype)
            size = p.numel() * _element_size(wire)
            bucket = open_.get(key)
            if bucket is not None and bucket.nbytes + size > self.bucket_bytes:
                close(key)
                bucket = None
            if bucket is None:
                bucket = _Bucket(-1, [], [], 0, wire, p.device)
                open_[key] = bucket
            bucket.params.append(p)
            bucket.offsets.append(bucket.numel)
            bucket.numel += p.numel()
        for key in list(open_):
            close(key)
        for bucket in buckets:
            bucket.buffer = torch.empty(
                bucket.numel + len(bucket.params), dtype=bucket.wire_dtype, device=bucket.device
            )
        return buckets

    def _check_same_layout(self) -> None:
        """One all-reduce (MAX of [h, −h]) proves every rank has the same layout hash h."""
        text = repr(
            (
                self.compression,
                self.bucket_bytes,
                self.overlap,
                [(str(b.wire_dtype), [tuple(p.shape) for p in b.params]) for b in self.buckets],
            )
        )
        digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")
        device = collective_device(self.group)
        check = torch.tensor([digest, -digest], dtype=torch.int64, device=device)
        dist.all_reduce(check, op=dist.ReduceOp.MAX, group=self.group)
        if check.tolist() != [digest, -digest]:
            raise LaunchError(
                "gradient synchronisation: ranks hold different parameter layouts or settings "
                "(parameter shapes/dtypes, parallel.bucket_mib, parallel.compression or "
                "parallel.overlap_comm differ between ranks)"
            )

    # ------------------------------------------------------------------ one step
    def _on_grad_ready(self, param: torch.Tensor) -> None:
        index, j = self._slot[id(param)]
        bucket = self.buckets[index]
        assert bucket.work is None, (
            "a gradient arrived for a bucket already being reduced: one backward per step, "
            "then GradientSynchronizer.finish()"
        )
        if not bucket.ready[j]:
            bucket.ready[j] = True
            bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        while self._next_launch < len(self.buckets) and self.buckets[self._next_launch].pending == 0:
            self._launch(self.buckets[self._next_launch])

    def _launch(self, bucket: _Bucket) -> None:
        """Flatten the bucket's gradients (zeros where missing) and start its async all-reduce."""
        assert bucket.index == self._next_launch and bucket.buffer is not None
        buffer = bucket.buffer
        for j, (p, offset) in enumerate(zip(bucket.params, bucket.offsets)):
            segment = buffer[offset : offset + p.numel()]
            if p.grad is None:
                segment.zero_()
            else:
                assert p.grad.layout == torch.strided, "sparse gradients are not supported"
                segment.copy_(p.grad.reshape(-1))
            bucket.local_has_grad[j] = p.grad is not None
            # fill_ with a host scalar is a kernel launch; copying a host list would sync the stream
            buffer[bucket.numel + j].fill_(1.0 if p.grad is not None else 0.0)
        bucket.pending = 0
        bucket.work = dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        self._bytes += bucket.nbytes
        self._next_launch += 1

    def _unflatten(self, bucket: _Bucket) -> bool:
        """Copy the reduced sums back into ``.grad``; returns whether any rank had a gradient."""
        buffer = bucket.buffer
        assert buffer is not None
        counts: list[float] | None = None
        any_grad = False
        for j, (p, offset) in enumerate(zip(bucket.params, bucket.offsets)):
            reduced = buffer[offset : offset + p.numel()].view(p.shape)
            if bucket.local_has_grad[j]:
                assert p.grad is not None
                p.grad.copy_(reduced)
                any_grad = True
                continue
            if counts is None:  # a host read (sync on CUDA), only when this rank lacks a gradient
                counts = buffer[bucket.numel :].tolist()
            if counts[j] > 0:
                p.grad = reduced.to(dtype=p.dtype, copy=True)
                any_grad = True
            else:
                p.grad = None
        return any_grad

    def finish(self) -> bool:
        """Complete this step's gradient sum: launch what is left, wait, write ``.grad`` back.

        After it returns, every synchronised parameter's ``.grad`` holds ``Σ_r grad_r`` (cast back
        from the wire dtype), or is None if no rank had a gradient for it. Blocks (gloo) or makes
        the current CUDA stream wait (NCCL) for the all-reduces; waits are bounded by the process
        group's timeout (``distributed.timeout_s``).

        Returns:
            True if at least one rank produced a gradient for some parameter this step (the same
            value on every rank); False means the caller should skip the optimiser step.

        Raises:
            RuntimeError / DistBackendError: from torch.distributed when a peer died or the
                collective timed out.
        """
        self._timer = DeviceClock(self._device)
        overlapped = self._next_launch  # buckets the hooks launched during backward
        while self._next_launch < len(self.buckets):
            self._launch(self.buckets[self._next_launch])
        any_grad = False
        for bucket in self.buckets:
            bucket.work.wait()
            any_grad |= self._unflatten(bucket)
        self._timer.stop()
        self._last = {
            "bytes": self._bytes,
            "buckets": len(self.buckets),
            "overlapped_buckets": overlapped,
        }
        self._bytes = 0
        self._next_launch = 0
        for bucket in self.buckets:
            bucket.reset()
        return any_grad

    def stats(self) -> dict[str, float | int]:
        """Communication figures of the last :meth:`finish` (synchronises on its CUDA event).

        Returns:
            ``comm_ms``: time the step waited for gradient communication, ms — from the start of
            :meth:`finish` to its end (launching what was left, waiting, copying back). Without
            overlap that is the whole all-reduce time; with overlap only the exposed part.
            ``bytes``: bytes all-reduced per rank (wire dtype, flags included).
            ``buckets``: number of all-reduce calls.
            ``overlapped_buckets``: buckets launched during backward (overlap mode), the rest
            were launched by :meth:`finish`. A bucket launches only after every earlier bucket, so
            a parameter that gets no gradient holds back its bucket and all later ones.
        """
        return {"comm_ms": self._timer.elapsed_ms() if self._timer is not None else 0.0, **self._last}

    @property
    def last_bytes(self) -> int:
        """Bytes all-reduced per rank by the last :meth:`finish` (no sync, unlike :meth:`stats`)."""
        return int(self._last["bytes"])

    @property
    def bucket_sizes_bytes(self) -> list[int]:
        """Wire size of each bucket in launch order, bytes."""
        return [b.nbytes for b in self.buckets]

    def close(self) -> None:
        """Remove the gradient hooks (overlap mode); the object is unusable afterwards."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

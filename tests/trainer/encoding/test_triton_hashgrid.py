"""Triton hash-grid kernels against the PyTorch reference (the slow twin).

On a CPU-only machine the kernels run in Triton's interpreter, which must be switched on before the
kernels are defined (``TRITON_INTERPRET=1`` is read when ``@triton.jit`` wraps them). Another test
may already have imported :mod:`trainer.encoding.triton_hashgrid` in this process without it, so
every interpreter check runs in a fresh subprocess: two workers share the cases between them and
run in parallel. Each worker *observes* (errors, dtypes, whether every output element was
written) and writes JSON; the tests below assert on those observations. With CUDA, the same
observations are made in-process at full size (paper-era grid, 2^20 points).

Inputs are fresh random draws each run; the seed is in every assertion message. Set
``NGPTUNE_TEST_SEED=<seed>`` to replay a run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.paths import REPO
from trainer.encoding.hashgrid import HashGridConfig


# Forward/backward parity bound (max |triton − reference| / max |reference|) for float32 sums.
REL_TOL = 1e-5
# Points exactly on the cube's corners, edges and faces, and outside it (clamped).
SPECIAL_POINTS = [
    [0.0, 0.0, 0.0],
    [1.0, 1.0, 1.0],
    [1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.0, 0.0, 1.0],
    [1.0, 1.0, 0.0],
    [0.5, 1.0, 0.0],
    [1.0, 0.5, 0.25],
    [-0.25, 0.5, 1.25],
    [1.5, -1.0, 0.5],
]

# Grids (HashGridConfig kwargs). Dense iff (N_l + 1)^3 <= T.
CONFIGS = {
    # N = 4, 8, 16; T = 2^14 ≥ 17^3: every level dense.
    "dense": dict(n_levels=3, log2_hashmap_size=14, base_resolution=4, per_level_scale=2.0),
    # N = 16, 24, 36, 54; T = 2^10 < 17^3: every level hashed.
    "hashed": dict(n_levels=4, log2_hashmap_size=10, base_resolution=16, per_level_scale=1.5),
    # N = 4, 8, 16, 32; T = 2^12: levels 0, 1 dense, 2, 3 hashed; F = 4.
    "mixed_f4": dict(
        n_levels=4, n_features_per_level=4, log2_hashmap_size=12, base_resolution=4,
        per_level_scale=2.0,
    ),
    # N = 8, 16; T = 2^10: one dense, one hashed level.
    "tiny": dict(n_levels=2, log2_hashmap_size=10, base_resolution=8, per_level_scale=2.0),
    "tiny_f1": dict(
        n_levels=2, n_features_per_level=1, log2_hashmap_size=10, base_resolution=8,
        per_level_scale=2.0,
    ),
    "tiny_f8": dict(
        n_levels=2, n_features_per_level=8, log2_hashmap_size=10, base_resolution=8,
        per_level_scale=2.0,
    ),
    # Paper-era grid (ANCHORS.md): L=16, F=2, T=2^19, N_min=16, b=1.5 (GPU only: large).
    "paper": dict(n_levels=16, log2_hashmap_size=19, base_resolution=16, per_level_scale=1.5),
}

# Interpreter cases. Cost is ~0.1 s per program (L × blocks, per launch), so blocks are chosen to
# cover tails and several blocks while keeping the file fast. Every case checks the forward kernel
# (poisoned feature-major output) and the backward kernel; ``extras`` adds the row-major output, a
# forward of a device count of live points (the rows after it untouched), a
# strided upstream gradient, int64 offsets, and the autograd path (gradient dtype, expanded
# upstream gradient, no gradient for x).
# (name, config, table dtype, n points, block or None for the module default, extras)
CPU_CASES = [
    ("dense_fp32_n1000", "dense", "float32", 1000, 1024, False),
    ("dense_fp16_n37", "dense", "float16", 37, None, False),
    ("hashed_fp32_n37", "hashed", "float32", 37, None, False),
    ("hashed_fp16_n1000", "hashed", "float16", 1000, 1024, False),
    ("mixed_f4_fp32_n1000", "mixed_f4", "float32", 1000, 1024, False),
    ("mixed_f4_fp16_n1", "mixed_f4", "float16", 1, None, False),
    ("tiny_fp32_n37_three_blocks", "tiny", "float32", 37, 16, False),
    ("tiny_f1_fp16_n37", "tiny_f1", "float16", 37, None, True),
    ("tiny_f8_fp32_n37", "tiny_f8", "float32", 37, None, True),
]

# Full size on CUDA; a negative n means |n| ray samples (128 consecutive samples per ray).
GPU_CASES = [
    ("paper_fp16_random_2p20", "paper", "float16", 1 << 20, None, True),
    ("paper_fp32_random_2p20", "paper", "float32", 1 << 20, None, True),
    ("paper_fp16_ray_2p20", "paper", "float16", -(1 << 20), None, True),
    ("mixed_f4_fp16_n1000", "mixed_f4", "float16", 1000, None, True),
    ("hashed_fp32_n37", "hashed", "float32", 37, None, True),
    ("dense_fp16_n1", "dense", "float16", 1, None, True),
    ("tiny_f8_fp32_n1000", "tiny_f8", "float32", 1000, None, True),
]

_SAMPLES_PER_RAY = 128


# ------------------------------------------------------------------------ observation side
# (runs in the worker subprocess, or in-process on CUDA)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b| (normwise, so values near zero do not blow it up)."""
    a, b = a.detach(), b.detach()
    scale = b.double().abs().max().clamp_min(1e-30)
    return float((a.double() - b.double()).abs().max() / scale)


def _fp16_ulp_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / (one float16 ulp of b + REL_TOL · max |b|); ≤ 1 means equal up to one fp16
    rounding step plus float32 summation noise (atomics add in another order than the reference;
    with cancellation a sum near zero may round to a neighbouring fp16 value)."""
    a, b = a.detach().double(), b.detach().double()
    bound = b.abs() * 2.0**-10 + 2.0**-24 + REL_TOL * b.abs().max()
    return float(((a - b).abs() / bound).max())


def _leaf(t: torch.Tensor) -> torch.Tensor:
    """A fresh leaf copy of ``t`` that requires grad."""
    return t.detach().clone().requires_grad_()


def _points(n: int, device: str, generator: torch.Generator) -> torch.Tensor:
    """n > 0: uniform in the cube (first rows the special points); n < 0: |n| ray samples,
    128 consecutive samples on the segment between two uniform points per ray."""
    if n < 0:
        n_rays = -n // _SAMPLES_PER_RAY
        ends = torch.rand(2, n_rays, 1, 3, generator=generator, device=device)
        t = (torch.arange(_SAMPLES_PER_RAY, device=device) + 0.5) / _SAMPLES_PER_RAY
        return (ends[0] + (ends[1] - ends[0]) * t[None, :, None]).reshape(-1, 3)
    x = torch.rand(n, 3, generator=generator, device=device)
    if n >= len(SPECIAL_POINTS):
        x[: len(SPECIAL_POINTS)] = torch.tensor(SPECIAL_POINTS, device=device)
    return x


def observe_case(case: tuple, device: str, seed: int) -> dict:
    """Run one case through the Triton kernels and the reference; return what was seen."""
    from trainer.encoding.hashgrid import hash_grid_encode_reference, level_offsets
    from trainer.encoding.triton_hashgrid import (
        BACKWARD_BLOCK,
        FORWARD_BLOCK,
        hash_grid_backward_triton,
        hash_grid_encode_triton,
        hash_grid_forward_triton,
    )

    name, config_name, dtype_name, n_signed, block, extras = case
    cfg = HashGridConfig(**CONFIGS[config_name])
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device=device).manual_seed(seed)
    n = abs(n_signed)
    width = cfg.output_dim
    x = _points(n_signed, device, generator)
    table_shape = (level_offsets(cfg)[-1], cfg.n_features_per_level)
    table = (torch.rand(table_shape, generator=generator, device=device) * 2 - 1).to(dtype)
    grad_features = torch.randn(n, width, generator=generator, device=device)
    forward_block = block or FORWARD_BLOCK
    backward_block = block or BACKWARD_BLOCK
    seen: dict = {"case": name, "seed": seed, "device": device}

    reference = hash_grid_encode_reference(x, table, cfg)
    err = _rel_err if dtype == torch.float32 else _fp16_ulp_err

    # Forward into a poisoned buffer: every element must be overwritten.
    layouts = [("feature_major", torch.full((width, n), float("nan"), device=device).t())]
    if extras:
        layouts.append(("row_major", torch.full((n, width), float("nan"), device=device)))
    for layout, poisoned in layouts:
        out = hash_grid_forward_triton(x, table, cfg, out=poisoned, block=forward_block)
        seen[f"{layout}_same_buffer"] = out.data_ptr() == poisoned.data_ptr()
        seen[f"{layout}_n_unwritten"] = int(torch.isnan(out).sum())
        seen[f"{layout}_forward_rel_err"] = _rel_err(out, reference)

    # Backward kernel: float32 gradient buffer vs reference autograd on a float32 copy.
    table_ref32 = _leaf(table.float())
    hash_grid_encode_reference(x, table_ref32, cfg).backward(grad_features)
    grad32 = hash_grid_backward_triton(x, grad_features, cfg, block=backward_block)
    seen["backward_dtype"] = str(grad32.dtype)
    seen["backward_rel_err"] = _rel_err(grad32, table_ref32.grad)
    if not extras:
        return seen

    # A column-major upstream gradient (strides (1, n)).
    grad_t = grad_features.t().contiguous().t()
    grad32_t = hash_grid_backward_triton(x, grad_t, cfg, block=backward_block)
    seen["backward_strided_rel_err"] = _rel_err(grad32_t, table_ref32.grad)

    # A device count of live points: the first count rows as without it, the rest left as they were.
    count = n // 3
    poisoned = torch.full((width, n), float("nan"), device=device).t()
    counted = hash_grid_forward_triton(x, table, cfg, out=poisoned, block=forward_block,
                                       count=torch.tensor(count, device=device))
    seen["counted_forward_rel_err"] = _rel_err(counted[:count], reference[:count]) if count else 0.0
    seen["counted_rows_untouched"] = bool(torch.isnan(counted[count:]).all())

    # int64 offsets (chosen automatically only for huge tables or batches).
    out_wide = hash_grid_forward_triton(x, table, cfg, block=forward_block, wide_index=True)
    seen["wide_forward_rel_err"] = _rel_err(out_wide, reference)
    grad32_wide = hash_grid_backward_triton(
        x, grad_features, cfg, block=backward_block, wide_index=True
    )
    seen["wide_backward_rel_err"] = _rel_err(grad32_wide, table_ref32.grad)

    # Autograd through the public entry point; gradient in the table's dtype, none for x.
    table_triton = _leaf(table)
    x_leaf = _leaf(x)
    features = hash_grid_encode_triton(x_leaf, table_triton, cfg)
    seen["encode_shape"] = list(features.shape)
    seen["encode_dtype"] = str(features.dtype)
    seen["encode_rel_err"] = _rel_err(features, reference)
    (features * grad_features).sum().backward()
    table_ref = _leaf(table)
    (hash_grid_encode_reference(x, table_ref, cfg) * grad_features).sum().backward()
    seen["autograd_grad_dtype"] = str(table_triton.grad.dtype)
    seen["autograd_grad_err"] = err(table_triton.grad, table_ref.grad)
    seen["x_grad_is_none"] = x_leaf.grad is None

    # features.sum(): the upstream gradient is an expanded tensor with zero strides.
    table_sum = _leaf(table)
    hash_grid_encode_triton(x, table_sum, cfg).sum().backward()
    table_sum_ref = _leaf(table)
    hash_grid_encode_reference(x, table_sum_ref, cfg).sum().backward()
    seen["sum_grad_err"] = err(table_sum.grad, table_sum_ref.grad)
    return seen


def observe_interpreter_backend(seed: int) -> dict:
    """Registry and module wiring of the backend under the interpreter (CPU)."""
    from trainer.encoding.backends import HashGridEncoding, get_backend
    from trainer.encoding.hashgrid import hash_grid_encode_reference
    from trainer.encoding.triton_hashgrid import INTERPRET, TritonBackend

    cfg = HashGridConfig(**CONFIGS["tiny"])
    backend = get_backend("triton", "cpu", torch.float16)
    generator = torch.Generator().manual_seed(seed)
    encoding = HashGridEncoding(cfg, backend="triton", table_dtype=torch.float16)
    x = torch.rand(37, 3, generator=generator)
    features = encoding(x)
    empty = encoding(torch.empty(0, 3))
    features.sum().backward()
    return {
        "seed": seed,
        "interpret": INTERPRET,
        "backend_type": type(backend).__name__,
        "is_triton_backend": isinstance(backend, TritonBackend),
        "available": backend.is_available(),
        "supports": {
            dtype: backend.supports(torch.device("cpu"), getattr(torch, dtype))
            for dtype in ("float16", "float32", "bfloat16", "float64")
        },
        "module_backend": encoding.backend_name,
        "module_rel_err": _rel_err(features, hash_grid_encode_reference(x, encoding.table, cfg)),
        "module_grad_dtype": str(encoding.table.grad.dtype),
        "empty_shape": list(empty.shape),
    }


def worker_main(out_path: str, seed: int, case_names: list[str]) -> None:
    """Subprocess entry point (under ``TRITON_INTERPRET=1``): observe the named cases, write JSON."""
    torch.set_num_threads(1)
    cases = [case for case in CPU_CASES if case[0] in case_names]
    observations = {case[0]: observe_case(case, "cpu", seed) for case in cases}
    if "backend" in case_names:
        observations["backend"] = observe_interpreter_backend(seed)
    Path(out_path).write_text(json.dumps(observations))


# ---------------------------------------------------------------------------- test side


def _seed() -> int:
    return int(os.environ.get("NGPTUNE_TEST_SEED", time.time_ns() % 2**31))


@pytest.fixture(scope="module")
def observations(tmp_path_factory) -> dict:
    """Run two interpreter workers in parallel (one per core) and merge their JSON."""
    pytest.importorskip("triton")
    seed = _seed()
    names = [case[0] for case in CPU_CASES] + ["backend"]
    tmp = tmp_path_factory.mktemp("triton_workers")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(
        TRITON_INTERPRET="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    workers = []
    for i, case_names in enumerate((names[0::2], names[1::2])):
        out_path = tmp / f"worker{i}.json"
        code = (
            "from tests.trainer.encoding.test_triton_hashgrid import worker_main; "
            f"worker_main({str(out_path)!r}, {seed}, {case_names!r})"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        workers.append((process, out_path))
    merged: dict = {}
    for process, out_path in workers:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"worker failed (seed {seed}):\n{output}"
        merged.update(json.loads(out_path.read_text()))
    return merged


def _check_case(seen: dict, table_dtype: str, extras: bool, backward_tol: float = REL_TOL, fp16_ulps: float = 1.0) -> None:
    """``backward_tol``/``fp16_ulps`` loosen the gradient checks for large GPU cases, where float32
    atomics add ~2^20 terms in another order than the reference (error ~ eps·sqrt(n) of the max)."""
    where = f"case {seen['case']} on {seen['device']} (seed {seen['seed']}): {seen}"
    layouts = ("feature_major", "row_major") if extras else ("feature_major",)
    for layout in layouts:
        assert seen[f"{layout}_same_buffer"], where
        assert seen[f"{layout}_n_unwritten"] == 0, where
        assert seen[f"{layout}_forward_rel_err"] < REL_TOL, where
    assert seen["backward_dtype"] == "torch.float32", where
    assert seen["backward_rel_err"] < backward_tol, where
    if not extras:
        return
    assert seen["backward_strided_rel_err"] < backward_tol, where
    assert seen["counted_forward_rel_err"] < REL_TOL, where
    assert seen["counted_rows_untouched"], where
    assert seen["wide_forward_rel_err"] < REL_TOL, where
    assert seen["wide_backward_rel_err"] < backward_tol, where
    assert seen["encode_dtype"] == "torch.float32", where
    assert seen["encode_rel_err"] < REL_TOL, where
    assert seen["autograd_grad_dtype"] == f"torch.{table_dtype}", where
    # float32: relative error; float16: one fp16 rounding step plus float32 summation noise
    grad_bound = backward_tol if table_dtype == "float32" else fp16_ulps
    assert seen["autograd_grad_err"] <= grad_bound, where
    assert seen["sum_grad_err"] <= grad_bound, where
    assert seen["x_grad_is_none"], where


@pytest.mark.parametrize("case", CPU_CASES, ids=[case[0] for case in CPU_CASES])
def test_interpreter_matches_reference(observations, case):
    name, config_name, dtype_name, n, _, extras = case
    seen = observations[name]
    if extras:
        assert seen["encode_shape"] == [n, HashGridConfig(**CONFIGS[config_name]).output_dim], seen
    _check_case(seen, dtype_name, extras)


def test_interpreter_backend_registers_and_encodes(observations):
    seen = observations["backend"]
    assert seen["interpret"] is True, seen
    assert seen["is_triton_backend"] and seen["backend_type"] == "TritonBackend", seen
    assert seen["available"] is True, seen
    assert seen["supports"] == {
        "float16": True, "float32": True, "bfloat16": False, "float64": False
    }, seen
    assert seen["module_backend"] == "triton", seen
    assert seen["module_rel_err"] < REL_TOL, seen
    assert seen["module_grad_dtype"] == "torch.float16", seen
    assert seen["empty_shape"] == [0, 4], seen


def test_backend_availability_in_this_process():
    """In this process the module may be compiled (the usual case) or interpreted."""
    triton_hashgrid = pytest.importorskip("trainer.encoding.triton_hashgrid")
    from trainer.encoding.backends import get_backend, registered_backends
    from trainer.contract.errors import ConfigError

    backend = triton_hashgrid.TritonBackend()
    assert "triton" in registered_backends()
    assert backend.supports(torch.device("cuda"), torch.bfloat16) is False
    if triton_hashgrid.INTERPRET:
        assert backend.is_available() and backend.supports(torch.device("cpu"), torch.float32)
        return
    assert backend.is_available() is torch.cuda.is_available()
    assert backend.supports(torch.device("cpu"), torch.float32) is False
    assert get_backend("auto", "cpu").name == "torch"
    problem = "does not support" if torch.cuda.is_available() else "is not available"
    with pytest.raises(ConfigError, match=rf"^encoding\.backend: 'triton' {problem}"):
        get_backend("triton", "cpu")


_ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA (and TRITON_INTERPRET unset)")
@pytest.mark.parametrize("case", GPU_CASES, ids=[case[0] for case in GPU_CASES])
def test_gpu_matches_reference(case):
    pytest.importorskip("triton")
    seed = _seed()
    seen = observe_case(case, "cuda", seed)
    width = HashGridConfig(**CONFIGS[case[1]]).output_dim
    assert seen["encode_shape"] == [abs(case[3]), width], seen
    _check_case(seen, case[2], case[5], backward_tol=1e-3, fp16_ulps=8.0)

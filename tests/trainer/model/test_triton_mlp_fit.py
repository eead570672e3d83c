"""A field whose fused MLP kernels do not fit the GPU, or compute wrong values there, runs its MLPs
on the PyTorch path.

:func:`trainer.model.triton_mlp.fused_kernels_problem` launches each fused kernel once on a few
samples when a field is built; a kernel that asks for more shared memory than the device has
raises Triton's ``OutOfResources`` at that first launch (the head's backward at width 128 on an
H100), and the field then keeps the PyTorch twin, says why (``fused_mlp_problem``), and
:func:`trainer.train.build.build_field` warns naming the width. In Triton's interpreter (a fresh
subprocess, tests/support/triton_worker.py), where nothing runs out of resources, the failure is
made by a kernel that raises the error Triton raises on the GPU.
"""

from __future__ import annotations

import json
import sys
import warnings

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, skip_without_program_loops

SHARED_ASKED, SHARED_LIMIT = 260352, 232448  # the H100's answer for the backward at width 128


def observe() -> dict:
    from triton.runtime.errors import OutOfResources, PTXASError

    from trainer.contract.config import TrainConfig, apply_overrides
    from trainer.model import triton_mlp
    from trainer.model.field import NGPField
    from trainer.train.build import build_field

    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    seen: dict = {"fits": NGPField(aabb, backend="torch", fused_mlp=True).fused_mlp,
                  "fits_tf32": NGPField(aabb, backend="torch", fused_mlp=True, mlp_precision="tf32").fused_mlp}
    bf16 = NGPField(aabb, backend="torch", fused_mlp=True, mlp_precision="bf16")  # no bfloat16 products here
    seen["bf16"] = {"fused_mlp": bf16.fused_mlp, "problem": bf16.fused_mlp_problem}

    class TooLarge:  # a kernel as Triton's launcher sees it, failing as on a GPU without the room
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise OutOfResources(SHARED_ASKED, SHARED_LIMIT, "shared memory")
            return launch

    triton_mlp._PROBED.clear()
    triton_mlp._head_backward_kernel = TooLarge()
    field = NGPField(aabb, backend="torch", fused_mlp=True)
    seen["too_large"] = {"fused_mlp": field.fused_mlp, "problem": field.fused_mlp_problem}
    class Broken:  # a kernel that another Triton error stops at its first launch (a compiler's)
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise PTXASError("ptxas fatal : out of registers")
            return launch

    triton_mlp._PROBED.clear()
    real_forward, triton_mlp._head_forward_kernel = triton_mlp._head_forward_kernel, Broken()
    broken = NGPField(aabb, backend="torch", fused_mlp=True)
    seen["broken"] = {"fused_mlp": broken.fused_mlp, "problem": broken.fused_mlp_problem}
    triton_mlp._head_forward_kernel = real_forward
    triton_mlp._PROBED.clear()
    cfg = apply_overrides(TrainConfig(), {"training.mlp_backend": "triton"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build_field(cfg, aabb, 1, torch.device("cpu"))
    seen["built"] = {"fused_mlp": built.fused_mlp, "warnings": [str(w.message) for w in caught]}
    # the PyTorch path trains: a backward through the field gives every MLP weight a gradient
    sigma, rgb = field(torch.rand(64, 3) * 2 - 1, torch.nn.functional.normalize(torch.randn(64, 3), dim=-1))
    (sigma.sum() + rgb.sum()).backward()
    seen["grads"] = all(w.grad is not None for w in field.density_mlp.weights() + field.rgb_mlp.weights())
    return seen


@pytest.fixture(scope="module")
def seen() -> dict:
    skip_without_program_loops()  # Triton 3.6 (a GPU host's): a field there takes the PyTorch path and names
    # the error (the "broken" case below); the CPU suite's Triton runs these
    return observe_in_interpreter(__file__, 0)


def test_kernels_that_fit_are_kept(seen):
    assert seen["fits"] is True and seen["fits_tf32"] is True


def test_kernels_that_compute_wrong_values_here_are_not_used(seen):
    # Triton's interpreter has no bfloat16 products: its σ is far from the float32 reference
    assert seen["bf16"]["fused_mlp"] is False
    assert "bf16 products give wrong values here" in seen["bf16"]["problem"]
    assert "interpreter has no bfloat16 products" in seen["bf16"]["problem"]


def test_a_kernel_that_another_triton_error_stops_leaves_the_pytorch_path_and_names_it(seen):
    assert seen["broken"]["fused_mlp"] is False
    assert seen["broken"]["problem"] == "they do not run here (PTXASError: PTXAS error: ptxas fatal : out of registers)"


def test_a_kernel_out_of_shared_memory_leaves_the_pytorch_path_and_says_why(seen):
    too_large = seen["too_large"]
    assert too_large["fused_mlp"] is False
    assert "shared memory" in too_large["problem"] and str(SHARED_ASKED) in too_large["problem"]
    assert seen["grads"] is True
    built = seen["built"]
    assert built["fused_mlp"] is False
    (message,) = [m for m in built["warnings"] if m.startswith("training.mlp_backend")]
    assert "cannot run on cpu at width 64" in message and str(SHARED_LIMIT) in message
    assert message.endswith("the PyTorch path runs the MLPs")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_default_width_keeps_the_fused_kernels_on_cuda_in_every_precision():
    from trainer.model.field import NGPField

    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]], device="cuda")
    for precision in ("ieee", "tf32", "bf16"):  # the probe's tolerance passes bfloat16 rounding
        field = NGPField(aabb, fused_mlp=True, mlp_precision=precision)
        assert field.fused_mlp and field.fused_mlp_problem is None, (precision, field.fused_mlp_problem)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_128_wide_field_trains_on_cuda_on_the_path_that_fits():
    from trainer.model.field import NGPField
    from trainer.model.mlp import MLPConfig

    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]], device="cuda")
    for precision in ("ieee", "tf32", "bf16"):
        field = NGPField(aabb, density_net=MLPConfig(n_neurons=128, n_hidden_layers=1),
                         rgb_net=MLPConfig(n_neurons=128, n_hidden_layers=2), fused_mlp=True, mlp_precision=precision)
        assert field.fused_mlp == (field.fused_mlp_problem is None), precision
        assert field.fused_mlp_problem is None or "shared memory" in field.fused_mlp_problem, field.fused_mlp_problem
        positions = torch.rand(4096, 3, device="cuda") * 2 - 1
        directions = torch.nn.functional.normalize(torch.randn(4096, 3, device="cuda"), dim=-1)
        sigma, rgb = field(positions, directions)
        (sigma.sum() + rgb.sum()).backward()
        assert torch.isfinite(sigma).all() and torch.isfinite(rgb).all(), precision
        assert all(w.grad is not None and torch.isfinite(w.grad).all() for w in field.rgb_mlp.weights()), precision


if __name__ == "__main__":
    print(json.dumps(observe()))

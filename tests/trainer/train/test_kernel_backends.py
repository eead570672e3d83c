"""The Triton march/compositing/MLP kernels in the training step against the PyTorch twins.

On CUDA (``auto`` picks the kernels there) a run with ``march_backend = render_backend = triton``
must train like one with ``torch``: same batch sizes, losses within float32 rounding of the
compositing kernels (they sum in another order), final parameters close. On the CPU ``triton`` is
refused with the key named (unless Triton's interpreter is on), and ``auto`` is the reference.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.contract.errors import ConfigError
from trainer.render import march
from trainer.train.loop import Trainer

STEPS = 40


def _run(scene, backend: str, device: str):
    # Both runs build rays with the same code (the ray kernel, which agrees with its twin to float32
    # rounding, has its own tests): a last-bit difference in a direction can move a sample across a
    # cell boundary, change a kept count and with it the next batch size, which this test compares.
    rays_backend = "auto" if device == "cuda" else "torch"
    cfg = tiny_config(training__march_backend=backend, training__render_backend=backend,
                      training__mlp_backend=backend, training__rays_backend=rays_backend, training__device=device,
                      training__target_samples_per_step=2**15)
    trainer = Trainer(cfg, load_scene(scene))
    assert trainer.march_backend == backend and trainer.triton_render == (backend == "triton")
    assert trainer.field.fused_mlp == (backend == "triton")
    losses, rays = [], []
    for _ in range(STEPS):
        stats, loss, _ = trainer.train_step()
        losses.append(float(loss))
        rays.append(stats.n_rays)
    state = {k: v.detach().float().cpu() for k, v in trainer.field.state_dict().items()}
    trainer.close()
    return losses, rays, state


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernels_train_like_the_reference_on_cuda(demo_scene):
    fast_losses, fast_rays, fast_state = _run(demo_scene, "triton", "cuda")
    ref_losses, ref_rays, ref_state = _run(demo_scene, "torch", "cuda")
    assert fast_rays == ref_rays
    for step, (a, b) in enumerate(zip(fast_losses, ref_losses)):
        assert a == pytest.approx(b, rel=1e-3, abs=1e-6), f"step {step}: {a} vs {b}"
    for name in ref_state:
        scale = float(ref_state[name].abs().max().clamp_min(1e-12))
        assert float((fast_state[name] - ref_state[name]).abs().max()) <= 1e-2 * scale, name


def test_triton_backend_on_a_cpu_is_refused_naming_the_key(demo_scene):
    if march.triton_march_available(torch.device("cpu")):
        pytest.skip("Triton's interpreter is on in this process: the kernels can run on the CPU")
    for key in ("march_backend", "render_backend", "rays_backend", "mlp_backend"):
        cfg = tiny_config(**{f"training__{key}": "triton", "training__device": "cpu"})
        with pytest.raises(ConfigError, match=f"training.{key}: 'triton' cannot run on cpu"):
            Trainer(cfg, load_scene(demo_scene))


def test_auto_on_a_cpu_uses_the_reference(demo_scene):
    trainer = Trainer(tiny_config(training__device="cpu"), load_scene(demo_scene))
    assert trainer.march_backend == "torch" and not trainer.triton_render and not trainer.sampler.triton_rays
    assert not trainer.field.fused_mlp  # auto (the default): the fused MLP on CUDA only
    trainer.close()


def test_a_float16_table_is_refused_for_training(demo_scene):
    with pytest.raises(ConfigError, match=r"encoding.table_dtype: training needs 'float32' tables, got 'float16'"):
        Trainer(tiny_config(encoding__table_dtype="float16", training__device="cpu"), load_scene(demo_scene))


def test_an_explicit_triton_mlp_that_cannot_apply_is_warned(demo_scene, monkeypatch):
    from trainer.train import build

    monkeypatch.setattr(build, "use_triton_kernels", lambda key, backend, device: backend == "triton")
    scene = load_scene(demo_scene)
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    odd_shape = tiny_config(training__mlp_backend="triton", rgb_network__n_hidden_layers=1)
    with pytest.warns(UserWarning, match=r"training.mlp_backend: 'triton' does not apply to these MLPs"):
        field = build.build_field(odd_shape, aabb, scene.aabb_scale, torch.device("cpu"))
    assert not field.fused_mlp
    half = tiny_config(training__mlp_backend="triton", training__precision="fp16")
    with pytest.warns(UserWarning, match=r"'triton' runs fp32, tf32 and bf16 steps; with training.precision 'fp16'"):
        build.build_field(half, aabb, scene.aabb_scale, torch.device("cpu"))

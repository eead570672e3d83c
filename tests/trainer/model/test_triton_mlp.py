"""The fused Triton MLP kernels (trainer/model/triton_mlp.py) against the field's PyTorch path.

A field with ``fused_mlp=True`` and its twin with the same parameters take the same samples and
upstream gradients; σ, rgb, ``density()`` without gradient (its own kernel) and the gradients of
every parameter (hash table included, through the features' gradient) must agree to float32 rounding (the kernels sum products in another order)
for IEEE products, and within the input rounding for TF32 (10-bit mantissa) and bfloat16 (7-bit)
products (``REL_TOL``). ``density(positions, count)`` must match on the first ``count`` rows and
be 0 after them. Cases: odd sample counts (tails of a tile and of a persistent program, and zero
samples), every SH degree, hidden widths 16 and 64, 8 and 32 hash-grid features, gradients into σ
only, each product precision. In Triton's interpreter (a fresh subprocess, see
tests/support/triton_worker.py) at small sizes — the interpreter multiplies TF32 inputs exactly and has no
bfloat16 products, so bfloat16 runs on CUDA only — and on CUDA at 2^18 samples; fresh random
draws each run (``NGPTUNE_TEST_SEED`` replays one). Samples whose hidden pre-activations lie within
``KINK_BAND`` of a ReLU kink are redrawn: there either side is correct at the precision's rounding.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed, skip_without_program_loops
from trainer.encoding.hashgrid import HashGridConfig
from trainer.model.field import NGPField
from trainer.model.mlp import MLPConfig

AABB = torch.tensor([[-1.0, -2.0, 0.0], [1.0, 2.0, 4.0]])
# (samples, SH degree, hidden width, hash-grid levels (2 features each), σ-only gradient, precision)
SMALL_CASES = ((0, 4, 64, 4, False, "ieee"), (1, 4, 64, 16, False, "ieee"), (33, 1, 16, 4, False, "ieee"),
               (77, 2, 64, 16, True, "ieee"), (300, 3, 16, 4, False, "ieee"), (513, 4, 64, 16, False, "ieee"),
               (130, 4, 64, 4, False, "tf32"))
CUDA_CASES = ((2**18 + 5, 4, 64, 16, False, "ieee"), (4099, 2, 64, 16, True, "ieee"),
              (2**18 + 5, 4, 64, 16, False, "tf32"), (2**18 + 5, 4, 64, 16, False, "bf16"))
# of each tensor's largest magnitude: float32 sums in another order; TF32 / bfloat16 input rounding
REL_TOL = {"ieee": 2e-5, "tf32": 1e-2, "bf16": 4e-2}
# of a layer's largest pre-activation: samples this close to a ReLU kink are not drawn. A sample is
# kept only if all ~320 hidden units clear the band, so the band sets the share kept: about 90 %
# (1e-4), 15 % (2e-3) and 1 % (5e-3) at width 64; 1e-2 keeps 2 in 10^4 and 4e-2 none, so that a
# draw of 2^18 such samples never ends. The TF32 and bfloat16 bands are about 4× and 1.3× one
# input rounding of a product (2^-11, 2^-8) relative to the largest term; a kink still flipped
# moves one sample's gradient, well inside REL_TOL of sums over 2^18 samples.
KINK_BAND = {"ieee": 1e-4, "tf32": 2e-3, "bf16": 5e-3}
MAX_DRAW_ROUNDS = 400  # rounds of 2n + 8 candidates before a draw is called hopeless


def _pair(degree: int, width: int, levels: int, device: str, generator: torch.Generator, precision: str):
    grid = HashGridConfig(n_levels=levels, n_features_per_level=2, log2_hashmap_size=12, base_resolution=4,
                          per_level_scale=1.5)
    nets = (MLPConfig(n_neurons=width, n_hidden_layers=1), MLPConfig(n_neurons=width, n_hidden_layers=2))
    ref = NGPField(AABB.to(device), grid, *nets, backend="torch", sh_degree=degree)
    fused = NGPField(AABB.to(device), grid, *nets, backend="torch", sh_degree=degree, fused_mlp=True,
                     mlp_precision=precision)
    with torch.no_grad():
        for p in ref.parameters():  # weights of visible size, so every layer matters
            p.copy_((torch.rand(p.shape, generator=generator) * 2 - 1).to(device) * (0.5 if p.ndim == 2 else 1.0))
    fused.load_state_dict(ref.state_dict())
    return ref, fused


def _hidden_pre_activations(field: NGPField, positions: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """[S] smallest |pre-activation| of any hidden ReLU unit per sample, each layer's values divided
    by that layer's largest magnitude."""
    hidden = [m for mlp in (field.density_mlp, field.rgb_mlp)
              for m in [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)][:-1]]
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.detach().abs())) for m in hidden]
    try:
        with torch.no_grad():
            field(positions, directions)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([(v / v.max().clamp_min(1e-30)).amin(dim=1) for v in seen]).amin(dim=0)


def _draw_samples(ref: NGPField, n: int, device: str, generator: torch.Generator, band: float):
    """n positions in the AABB and unit directions, none with a hidden pre-activation within
    ``band`` of zero: there float32 sums in another order (or rounded inputs) may land on either
    side of the ReLU and flip one sample's whole gradient path (seen once in 10^5 values at
    float32, seed 917018)."""
    kept_positions, kept_directions, count = [], [], 0
    for _ in range(MAX_DRAW_ROUNDS):
        positions = (AABB[0] + torch.rand(2 * n + 8, 3, generator=generator) * (AABB[1] - AABB[0])).to(device)
        directions = torch.nn.functional.normalize(torch.randn(2 * n + 8, 3, generator=generator), dim=1).to(device)
        keep = _hidden_pre_activations(ref, positions, directions) > band
        kept_positions.append(positions[keep])
        kept_directions.append(directions[keep])
        count += int(keep.sum())
        if count >= n:
            return torch.cat(kept_positions)[:n], torch.cat(kept_directions)[:n]
    raise AssertionError(f"{count} of {n} samples clear the ReLU kinks by {band} after {MAX_DRAW_ROUNDS} rounds of "
                         f"{2 * n + 8} candidates: the band is too wide for this network")


def observe(device: str, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n, degree, width, levels, sigma_only, precision in (CUDA_CASES if device == "cuda" else SMALL_CASES):
        ref, fused = _pair(degree, width, levels, device, generator, precision)
        positions, directions = _draw_samples(ref, n, device, generator, KINK_BAND[precision])
        count = n // 3
        g_sigma = torch.randn(n, generator=generator).to(device)
        g_rgb = torch.randn(n, 3, generator=generator).to(device)
        results = {}
        for name, field in (("ref", ref), ("fused", fused)):
            sigma, rgb = field(positions, directions)
            loss = (sigma * g_sigma).sum() + (0 if sigma_only else (rgb * g_rgb).sum())
            loss.backward()
            grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)) for k, p in field.named_parameters()}
            with torch.no_grad():  # the density-only kernel (compaction, occupancy update), with a live count
                density = field.density(positions)
                counted = field.density(positions, torch.tensor(count, device=device))
            results[name] = {"sigma": sigma.detach(), "rgb": rgb.detach(), "density": density,
                             "density_counted": counted[:count], **grads}
            if name == "fused":
                tail = counted[count:]
                tail_zero = bool((tail == 0).all())
        errors = {}
        for key, ref_value in results["ref"].items():
            scale = float(ref_value.abs().max()) if ref_value.numel() else 0.0
            diff = float((results["fused"][key] - ref_value).abs().max()) if ref_value.numel() else 0.0
            errors[key] = {"diff": diff, "scale": scale, "finite": bool(torch.isfinite(results["fused"][key]).all())}
        seen.append({"n": n, "degree": degree, "width": width, "precision": precision, "seed": seed,
                     "fused": fused.fused_mlp, "errors": errors, "tail_zero": tail_zero})
    return seen


def _check(seen: list[dict], cases) -> None:
    assert [(r["n"], r["degree"], r["width"], r["precision"]) for r in seen] == [c[:3] + c[5:] for c in cases]
    for r in seen:
        case = f"n={r['n']} degree {r['degree']} width {r['width']} {r['precision']} seed {r['seed']}"
        assert r["fused"], f"{case}: the field did not take the fused path"
        # σ, rgb, density(), density(count), table, 2 density and 3 colour weights
        assert len(r["errors"]) == 4 + 6, case
        assert r["tail_zero"], f"{case}: density past the live count is not 0"
        tol = REL_TOL[r["precision"]]
        for key, e in r["errors"].items():
            assert e["finite"], f"{case}: {key} has NaN/Inf (an element left unwritten?)"
            assert e["diff"] <= tol * max(e["scale"], 1e-6), f"{case}: {key} differs by {e['diff']} (scale {e['scale']})"


def test_fused_mlp_matches_the_reference_in_the_interpreter():
    skip_without_program_loops()  # Triton 3.6's interpreter (a GPU host's); the CPU suite's runs it
    _check(observe_in_interpreter(__file__, random_seed()), SMALL_CASES)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_mlp_matches_the_reference_on_cuda():
    _check(observe("cuda", random_seed()), CUDA_CASES)


def test_shapes_outside_the_kernels_keep_the_reference_path():
    from trainer.model.triton_mlp import fused_head_supported

    grid = HashGridConfig(n_levels=2, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4, per_level_scale=2.0)
    for density, rgb in (
        (MLPConfig(n_hidden_layers=2), MLPConfig(n_hidden_layers=2)),  # two density hidden layers
        (MLPConfig(n_neurons=48), MLPConfig(n_neurons=48, n_hidden_layers=2)),  # not a power of two
        (MLPConfig(), MLPConfig(n_hidden_layers=2, activation="Tanh")),
        (MLPConfig(), MLPConfig(n_hidden_layers=2, output_activation="Sigmoid")),
    ):
        field = NGPField(AABB, grid, density, rgb, backend="torch", fused_mlp=True)
        assert not field.fused_mlp
        activations = (density.activation, density.output_activation, rgb.activation, rgb.output_activation)
        assert not fused_head_supported(field.density_mlp.weights(), field.rgb_mlp.weights(), activations)
    field = NGPField(AABB, grid, backend="torch", fused_mlp=True)
    assert field.fused_mlp  # the defaults are instant-ngp's shapes


def test_bad_inputs_are_refused():
    from trainer.model.triton_mlp import fused_density, fused_field_head

    grid = HashGridConfig(n_levels=2, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4, per_level_scale=2.0)
    field = NGPField(AABB, grid, backend="torch")
    dw, rw = field.density_mlp.weights(), field.rgb_mlp.weights()
    with pytest.raises(ValueError, match=r"features must be \[S, 4\] float32, got \(5, 3\)"):
        fused_field_head(torch.zeros(5, 3), torch.zeros(5, 16), dw, rw)
    with pytest.raises(ValueError, match=r"sh must be \[5, >= 16\] float32"):
        fused_field_head(torch.zeros(5, 4), torch.zeros(5, 9), dw, rw)
    with pytest.raises(ValueError, match="outside what the kernels implement"):
        fused_field_head(torch.zeros(5, 4), torch.zeros(5, 16), dw[:1], rw)
    with pytest.raises(ValueError, match=r"fused_density: features must be \[S, 4\] float32, got \(5, 4\) torch.float64"):
        fused_density(torch.zeros(5, 4, dtype=torch.float64), dw)


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))

"""The fused MLP kernels read the hash grid's features in place, in either layout.

The Triton hash grid returns its features feature-major (an ``[S, L·F]`` view with strides
``(1, S)``); :func:`trainer.model.triton_mlp.fused_field_head` and
:func:`~trainer.model.triton_mlp.fused_density` read that layout and the row-major one without a
copy, and the features' gradient comes back in the layout the features had. The same kernel does
the same arithmetic on the same values whatever the addresses, so both layouts (and a
non-dense view, copied to row-major first) must give bitwise the same σ, rgb, density and
gradients. Checked in Triton's interpreter at small sizes (a fresh subprocess, see
tests/support/triton_worker.py) and on CUDA at 2^18 + 5 samples; fresh random draws each run
(``NGPTUNE_TEST_SEED`` replays one).
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed, skip_without_program_loops

WIDTH, N_IN, N_SH = 64, 32, 16  # instant-ngp's shapes: 16 levels × 2 features, SH degree 4
SMALL_SIZES = (1, 37, 300)
CUDA_SIZES = (2**18 + 5,)


def _weights(generator: torch.Generator, device: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    def matrix(rows: int, cols: int) -> torch.Tensor:
        w = (torch.rand(rows, cols, generator=generator) * 2 - 1) / cols**0.5
        return w.to(device).requires_grad_(True)

    density = [matrix(WIDTH, N_IN), matrix(16, WIDTH)]
    rgb = [matrix(WIDTH, 15 + N_SH), matrix(WIDTH, WIDTH), matrix(3, WIDTH)]
    return density, rgb


def _layouts(features: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values row-major, feature-major (the hash grid's) and as a non-dense view."""
    n = features.shape[0]
    wide = torch.zeros(n, 2 * N_IN, device=features.device)
    wide[:, ::2] = features
    return {"row_major": features.contiguous(), "feature_major": features.t().contiguous().t(),
            "strided": wide[:, ::2]}


def observe(device: str, seed: int) -> list[dict]:
    from trainer.model.triton_mlp import fused_density, fused_field_head

    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n in CUDA_SIZES if device == "cuda" else SMALL_SIZES:
        for precision in ("ieee", "tf32"):
            density_w, rgb_w = _weights(generator, device)
            features = (torch.rand(n, N_IN, generator=generator) * 2 - 1).to(device)
            sh = (torch.rand(n, N_SH, generator=generator) * 2 - 1).to(device)
            g_sigma = torch.randn(n, generator=generator).to(device)
            g_rgb = torch.randn(n, 3, generator=generator).to(device)
            count = torch.tensor(n // 2, device=device)
            results = {}
            for name, x in _layouts(features).items():
                x = x.detach().requires_grad_(True)
                for w in density_w + rgb_w:
                    w.grad = None
                sigma, rgb = fused_field_head(x, sh, density_w, rgb_w, precision)
                ((sigma * g_sigma).sum() + (rgb * g_rgb).sum()).backward()
                results[name] = {
                    "sigma": sigma.detach(), "rgb": rgb.detach(), "g_x": x.grad,
                    "density": fused_density(x.detach(), density_w, precision),
                    "density_counted": fused_density(x.detach(), density_w, precision, count),
                    **{f"w{i}": w.grad.clone() for i, w in enumerate(density_w + rgb_w)},
                }
                results[name]["same_layout"] = name == "strided" or x.grad.stride() == x.stride() or n == 1
            record = {"n": n, "precision": precision, "seed": seed, "layouts": {}}
            reference = results["row_major"]
            for name, values in results.items():
                record["layouts"][name] = {
                    "same_layout": values["same_layout"],
                    "mismatched": [key for key, value in values.items() if key != "same_layout"
                                   and not torch.equal(value, reference[key])],
                }
            seen.append(record)
    return seen


def _check(seen: list[dict], sizes) -> None:
    assert [(r["n"], r["precision"]) for r in seen] == [(n, p) for n in sizes for p in ("ieee", "tf32")]
    for r in seen:
        assert set(r["layouts"]) == {"row_major", "feature_major", "strided"}
        for name, layout in r["layouts"].items():
            case = f"n={r['n']} {r['precision']} {name} seed {r['seed']}"
            assert not layout["mismatched"], f"{case}: differs from row-major in {layout['mismatched']}"
            assert layout["same_layout"], f"{case}: the features' gradient has another layout than the features"


def test_both_layouts_give_the_same_results_in_the_interpreter():
    skip_without_program_loops()  # Triton 3.6's interpreter (a GPU host's); the CPU suite's runs it
    _check(observe_in_interpreter(__file__, random_seed()), SMALL_SIZES)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_both_layouts_give_the_same_results_on_cuda():
    _check(observe("cuda", random_seed()), CUDA_SIZES)


#: Samples past which a feature-major column offset (feature index × S) no longer fits in int32.
PAST_INT32 = 2**26 + 2**25  # 31 · S ≈ 3.1e9 > 2^31


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (about 45 GiB of GPU memory)")
def test_feature_major_offsets_past_2_31_elements_on_cuda():
    """The last rows of a feature-major batch whose column offsets pass 2^31 (a real capture's
    evaluation chunk marches ~10^8 samples) give what the same rows give alone, forward and back."""
    from trainer.model.triton_mlp import fused_density, fused_field_head

    generator = torch.Generator(device="cuda").manual_seed(random_seed())
    density_w, rgb_w = _weights(torch.Generator().manual_seed(3), "cuda")
    features = torch.empty(N_IN, PAST_INT32, device="cuda").uniform_(-1, 1, generator=generator).t()
    sh = torch.empty(PAST_INT32, N_SH, device="cuda").uniform_(-1, 1, generator=generator)
    tail = slice(PAST_INT32 - 1000, PAST_INT32)
    g_sigma = torch.zeros(PAST_INT32, device="cuda")
    g_sigma[tail] = 1.0
    x = features.requires_grad_(True)
    sigma, rgb = fused_field_head(x, sh, density_w, rgb_w, "ieee")
    sigma.backward(g_sigma)
    density = fused_density(features.detach(), density_w, "ieee")

    alone = features.detach()[tail].contiguous().requires_grad_(True)
    sigma_alone, rgb_alone = fused_field_head(alone, sh[tail].contiguous(), density_w, rgb_w, "ieee")
    sigma_alone.backward(torch.ones(1000, device="cuda"))
    assert torch.equal(sigma[tail], sigma_alone) and torch.equal(rgb[tail], rgb_alone)
    assert torch.equal(density[tail], fused_density(alone.detach(), density_w, "ieee"))
    assert torch.equal(x.grad[tail], alone.grad)


def test_dense_features_keeps_both_layouts_and_copies_the_rest():
    from trainer.model.triton_mlp import dense_features

    features = torch.arange(5 * 4, dtype=torch.float32).reshape(5, 4)
    feature_major = features.t().contiguous().t()
    assert dense_features(features) is features
    assert dense_features(feature_major) is feature_major
    strided = torch.zeros(5, 8)[:, ::2]
    copied = dense_features(strided)
    assert copied is not strided and copied.stride() == (4, 1)


if __name__ == "__main__":  # the interpreter worker (tests/support/triton_worker.py)
    print(json.dumps(observe("cpu", int(sys.argv[1]))))

"""The one-launch Triton SH kernel against :func:`trainer.encoding.sh.sh_encode` (its slow twin).

The kernel keeps the reference's float32 operation order with contraction off, so its values must
be bitwise equal: in Triton's interpreter (a fresh subprocess, since TRITON_INTERPRET is read when
the kernel is defined) and on CUDA. Directions are fresh random draws plus the axes and odd sizes
(tails of the last block); the seed is in the messages (``NGPTUNE_TEST_SEED`` replays a run).
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed

SIZES = (0, 1, 255, 257, 1000)


def observe(device: str, seed: int) -> list[dict]:
    from trainer.encoding.sh import sh_encode
    from trainer.encoding.triton_sh import sh_encode_triton

    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n in SIZES:
        dirs = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator), dim=-1)
        if n >= 6:
            dirs[:6] = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0], [0, 0, 1.0], [0, 0, -1.0]])
        dirs = dirs.to(device)
        fast, ref = sh_encode_triton(dirs), sh_encode(dirs)
        seen.append({"n": n, "seed": seed, "shape": list(fast.shape), "dtype": str(fast.dtype),
                     "equal": bool(torch.equal(fast, ref)), "max_diff": float((fast - ref).abs().max()) if n else 0.0})
    return seen


def _check(seen: list[dict]) -> None:
    assert [r["n"] for r in seen] == list(SIZES)
    for r in seen:
        assert r["shape"] == [r["n"], 16] and r["dtype"] == "torch.float32", r
        assert r["equal"], f"n={r['n']} seed {r['seed']}: max |triton − reference| = {r['max_diff']}"



def test_triton_sh_is_bitwise_the_reference_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_sh_is_bitwise_the_reference_on_cuda():
    _check(observe("cuda", random_seed()))


def test_field_uses_the_reference_where_a_gradient_is_wanted():
    from trainer.model.field import _encode_directions
    from trainer.encoding.sh import sh_encode

    dirs = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1).requires_grad_()
    out = _encode_directions(dirs)
    assert out.requires_grad and torch.equal(out, sh_encode(dirs))
    assert torch.equal(_encode_directions(dirs, 2), sh_encode(dirs, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_field_takes_the_leading_columns_of_the_kernel_for_lower_degrees(degree):
    from trainer.encoding.sh import sh_encode
    from trainer.model.field import _encode_directions

    dirs = torch.nn.functional.normalize(torch.randn(1000, 3, device="cuda"), dim=-1)
    assert torch.equal(_encode_directions(dirs, degree), sh_encode(dirs, degree))


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))

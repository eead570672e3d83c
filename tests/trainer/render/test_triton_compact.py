"""The one-launch Triton slot kernel of sample compaction against the PyTorch twin in
:func:`trainer.render.compact.compact_samples`: identical outputs (integer arithmetic and copies).

Random rays with 0..K samples (empty rays included), kept counts from the reference, capacities
from far above to far below the kept total (most rays dropped), one ray and one slot; checked in
Triton's interpreter (a fresh subprocess) and on CUDA. Fresh seeds (``NGPTUNE_TEST_SEED`` replays).
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed

CASES = ((1, 5, 1.0), (1, 5, 0.01), (7, 3, 2.0), (300, 40, 1.0), (300, 40, 0.6), (513, 25, 0.05), (1000, 12, 1.3))


def observe(device: str, seed: int) -> list[dict]:
    from tests.support.packed_samples import packed_samples
    from trainer.render.compact import compact_samples, kept_counts
    from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE

    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n_rays, most, fraction in CASES:
        counts = torch.randint(0, most, (n_rays,), generator=generator)
        counts[0] = max(int(counts[0]), 1)  # at least one sample
        samples, sigmas = packed_samples(counts, generator)
        kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
        capacity = max(1, int(fraction * int(kept.sum())))
        samples = type(samples)(**{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in vars(samples).items()})
        kept = kept.to(device)
        ref = compact_samples(samples, kept, capacity)
        fast = compact_samples(samples, kept, capacity, triton=True)
        fields = {name: (getattr(ref.samples, name), getattr(fast.samples, name))
                  for name in ("positions", "directions", "t", "dt", "ray_indices", "packed_info")}
        fields.update(ray_fits=(ref.ray_fits, fast.ray_fits), n_kept=(ref.n_kept, fast.n_kept),
                      source=(ref.source, fast.source), is_padding=(ref.is_padding, fast.is_padding))
        seen.append({"case": [n_rays, most, fraction], "capacity": capacity, "seed": seed,
                     "padding": int(ref.is_padding.sum()),
                     "mismatch": [name for name, (a, b) in fields.items()
                                  if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b)]})
    return seen


def _check(seen: list[dict]) -> None:
    assert [r["case"] for r in seen] == [list(c) for c in CASES]
    for r in seen:
        assert r["mismatch"] == [], r
    assert any(r["padding"] > 0 for r in seen) and any(r["padding"] == 0 for r in seen), seen


def test_triton_compaction_is_the_reference_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_compaction_is_the_reference_on_cuda():
    _check(observe("cuda", random_seed()))


def test_bad_inputs_are_refused():
    from trainer.render.triton_compact import compact_slots_triton

    one = torch.zeros(1, dtype=torch.long)
    samples = (torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="capacity, rays and samples"):
        compact_slots_triton(one, one, one, one, *samples, capacity=0)
    with pytest.raises(ValueError, match="must be \\[n_rays\\] int64"):
        compact_slots_triton(one, one.int(), one, one, *samples, capacity=4)


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))

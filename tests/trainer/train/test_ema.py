"""The weight EMA (tiny-cuda-nn ``Ema``) against a plain loop, and evaluation rendering with it."""

from __future__ import annotations

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.train.ema import WeightEMA
from trainer.train.loop import Trainer


def test_debiased_average_matches_the_recurrence():
    decay = 0.9
    p = torch.nn.Parameter(torch.zeros(5))
    q = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float16))
    ema = WeightEMA(decay)
    m_p, m_q = torch.zeros(5, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    for t in range(1, 8):
        with torch.no_grad():
            p.copy_(torch.randn(5, generator=generator))
            q.copy_(torch.randn(2, 3, generator=generator).half())
        ema.update([p, q])
        m_p = decay * m_p + (1 - decay) * p.double()
        m_q = decay * m_q + (1 - decay) * q.double()
        torch.testing.assert_close(ema.average(p).double(), m_p / (1 - decay**t), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ema.average(q).double(), m_q / (1 - decay**t), rtol=1e-6, atol=1e-6)
    assert ema.average(torch.nn.Parameter(torch.zeros(1))) is None  # never updated


def test_first_average_is_the_weights_and_a_new_parameter_starts_its_own():
    ema = WeightEMA(0.95)
    p = torch.nn.Parameter(torch.arange(4.0))
    ema.update([p])
    assert torch.equal(ema.average(p), p.detach())
    replacement = torch.nn.Parameter(torch.full((4,), 7.0))  # e.g. a box that moved to this rank
    ema.update([replacement])
    assert torch.equal(ema.average(replacement), replacement.detach())
    assert ema.average(p) is None  # forgotten once it is no longer trained here


def test_applied_swaps_in_the_average_and_restores_the_weights_exactly():
    ema = WeightEMA(0.5)
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    ema.update([p])
    with torch.no_grad():
        p.copy_(torch.tensor([3.0, 6.0]))
    ema.update([p])  # m = 0.25·[1,2] + 0.5·[3,6] → debiased /0.75
    before = p.detach().clone()
    with ema.applied([p]):
        torch.testing.assert_close(p.detach(), torch.tensor([7.0 / 3.0, 14.0 / 3.0]))
    assert torch.equal(p.detach(), before)
    with pytest.raises(RuntimeError), ema.applied([p]):
        raise RuntimeError("an evaluation that fails")
    assert torch.equal(p.detach(), before)


@pytest.mark.parametrize("decay", [None, 0.9])
def test_evaluation_renders_with_the_average_and_training_resumes_on_the_weights(demo_scene, decay):
    trainer = Trainer(tiny_config(optimizer__ema_decay=decay, training__eval_max_images=1), load_scene(demo_scene))
    for _ in range(12):
        trainer.train_step()
    trained = {n: p.detach().clone() for n, p in trainer.field.named_parameters()}
    seen = {}
    original = trainer.field.forward

    def spy(*args, **kwargs):  # what the field holds while evaluation renders
        seen.update({n: p.detach().clone() for n, p in trainer.field.named_parameters()})
        return original(*args, **kwargs)

    trainer.field.forward = spy
    trainer.evaluate(save_renders=False)
    trainer.field.forward = original
    for name, p in trainer.field.named_parameters():
        assert torch.equal(p.detach(), trained[name]), f"{name} not restored after evaluation"
        if decay is None:
            assert torch.equal(seen[name], trained[name]), name
        else:
            assert torch.equal(seen[name], trainer.weight_ema.average(p).to(p.dtype)), name
    if decay is not None:
        assert any(not torch.equal(seen[n], trained[n]) for n in trained), "the average equals the weights"
    trainer.close()


def test_a_resumed_run_starts_its_average_from_the_loaded_weights(demo_scene, tmp_path):
    trainer = Trainer(tiny_config(optimizer__ema_decay=0.9), load_scene(demo_scene))
    for _ in range(5):
        trainer.train_step()
    path = trainer.save(tmp_path / "snap.pt")
    for _ in range(3):
        trainer.train_step()
    trainer.load(path)
    for p in trainer.field.parameters():
        assert trainer.weight_ema.average(p) is None  # nothing of the later steps is mixed in
    trainer.train_step()
    for p in trainer.field.parameters():
        torch.testing.assert_close(trainer.weight_ema.average(p), p.detach().float(), rtol=1e-5, atol=1e-7)
    trainer.close()


def test_a_decay_outside_the_open_interval_is_refused():
    with pytest.raises(ValueError, match="optimizer.ema_decay"):
        WeightEMA(1.0)

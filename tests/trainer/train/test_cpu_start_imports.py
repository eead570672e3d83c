"""A CPU training process loads neither ``torch._dynamo`` nor Triton (seconds of every rank's
start-up; :mod:`trainer.train.eager_optim`, :func:`trainer.render.march.triton_march_available`,
:func:`trainer.encoding.backends.get_backend`), and the optimizer's methods keep torch's grad mode
with ``torch._dynamo`` loaded or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.train.eager_optim import call_eagerly, grad_mode_of_differentiable

ROOT = Path(__file__).resolve().parents[3]

_TRAIN_ON_CPU = """
import json, sys
from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.train.loop import Trainer

cfg = tiny_config(training__device="cpu")
trainer = Trainer(cfg, load_scene(sys.argv[1]))
for _ in range(3):
    trainer.train_step()
state = trainer.optimizer.state_dict()
trainer.optimizer.load_state_dict(state)
trainer.optimizer.zero_grad(set_to_none=True)
trainer.close()
print(json.dumps({name: name in sys.modules for name in ("torch._dynamo", "triton")}))
"""


def test_training_on_the_cpu_imports_neither_dynamo_nor_triton(demo_scene: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _TRAIN_ON_CPU, str(demo_scene)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"torch._dynamo": False, "triton": False}


class _Optimizer:
    def __init__(self, differentiable: bool) -> None:
        self.defaults = {"differentiable": differentiable}


@grad_mode_of_differentiable
def _grad_mode_inside(optimizer: _Optimizer) -> bool:
    return torch.is_grad_enabled()


@pytest.mark.parametrize("differentiable", [False, True])
@pytest.mark.parametrize("outside", [False, True])
def test_a_step_runs_in_the_grad_mode_torch_gives_it(differentiable: bool, outside: bool) -> None:
    with torch.set_grad_enabled(outside):
        assert _grad_mode_inside(_Optimizer(differentiable)) is differentiable
        assert torch.is_grad_enabled() is outside


_WITH_DYNAMO = """
import json, torch, torch._dynamo
from trainer.train.grid_adam import GridAdam
calls = {"disable": 0, "graph_break": 0}
for name in calls:
    def counted(*args, _name=name, _original=getattr(torch._dynamo, name), **kwargs):
        calls[_name] += 1
        return _original(*args, **kwargs)
    setattr(torch._dynamo, name, counted)
p = torch.nn.Parameter(torch.ones(3))
opt = GridAdam([p], lr=0.1)
p.grad = torch.ones(3)
with torch.enable_grad():
    opt.step()
    inside_after = torch.is_grad_enabled()
opt.zero_grad()
print(json.dumps({"p": p.tolist(), "grad_none": p.grad is None, "grad_after": inside_after, **calls}))
"""


def test_with_dynamo_loaded_the_methods_go_through_torchs_wrappers() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _WITH_DYNAMO], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["p"] == pytest.approx([0.9] * 3) and found["grad_none"] and found["grad_after"]
    # torch's wrappers ran: add_param_group's and zero_grad's disable, the step's two graph breaks
    assert found["disable"] >= 2 and found["graph_break"] == 2


def test_call_eagerly_calls_a_plain_function_as_it_is() -> None:
    assert call_eagerly(max, 2, 5) == 5

"""The one place that picks a trainer's Step (trainer.train.step_choice), and the steps' reach into
other modules: none of them uses another module's underscore names."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scenes import tiny_config
from trainer.contract.errors import ConfigError
from trainer.data import load_scene
from trainer.parallel.data_step import DataParallelStep
from trainer.parallel.subgrid_step import SubgridStep
from trainer.parallel.subgrid_train import SubgridTrainer
from trainer.parallel.trainer import DataParallelTrainer
from trainer.train.dynamic_step import DynamicStep
from trainer.train.fixed_step import FixedCapacityStep
from trainer.train.loop import Trainer
from trainer.train.step_choice import choose_step

STEP_MODULES = [
    "trainer/train/loop.py", "trainer/train/step.py", "trainer/train/step_choice.py", "trainer/train/dynamic_step.py",
    "trainer/train/fixed_step.py", "trainer/train/capture.py", "trainer/train/inputs.py", "trainer/train/phases.py",
    "trainer/train/optimization.py", "trainer/train/batch_size.py", "trainer/train/records.py",
    "trainer/train/snapshot_state.py", "trainer/train/budget.py", "trainer/parallel/trainer.py",
    "trainer/parallel/subgrid_train.py", "trainer/parallel/collectives.py", "trainer/parallel/dist_step.py",
    "trainer/parallel/data_step.py", "trainer/parallel/subgrid_step.py",
]


@pytest.mark.parametrize("mode, step_class, kind, graph", [
    ("auto", DynamicStep, "dynamic", None),
    ("dynamic", DynamicStep, "dynamic", None),
    ("off", FixedCapacityStep, "fixed", None),
])
def test_a_cpu_trainer_runs_the_step_of_training_cuda_graphs(demo_scene, mode, step_class, kind, graph):
    trainer = Trainer(tiny_config(training__cuda_graphs=mode), load_scene(demo_scene))
    assert type(trainer.stepper) is step_class and trainer.step_choice.kind == kind
    assert getattr(trainer.stepper, "graph", None) is graph
    if mode == "auto":  # the reason names what blocks capture here
        assert "training.device is cpu: CUDA graph capture needs CUDA" in trainer.step_choice.reason
    # the dynamic step prepares its input ahead (training.prefetch_march); the fixed one never waits
    assert (trainer.prefetcher is not None) == (step_class is DynamicStep)
    trainer.close()


def test_capture_asked_for_where_it_cannot_run_names_the_blockers(demo_scene):
    with pytest.raises(ConfigError, match=r"training.cuda_graphs: 'on' cannot capture this step: "
                                          r"training.device is cpu: CUDA graph capture needs CUDA"):
        Trainer(tiny_config(training__cuda_graphs="on"), load_scene(demo_scene))


def test_each_capture_blocker_of_a_cuda_trainer_is_named_on_its_own(demo_scene):
    import torch

    from trainer.train.step_choice import capture_blockers

    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    try:
        def on_cuda(triton_rays: bool, placement: str) -> list[str]:  # what a CUDA trainer would see
            sampler = types.SimpleNamespace(triton_rays=triton_rays, placement=placement)
            return capture_blockers(types.SimpleNamespace(cfg=trainer.cfg, device=torch.device("cuda"),
                                                          march_backend="triton", triton_render=True,
                                                          sampler=sampler))
        assert not any("Triton kernel" in r or "placement" in r for r in on_cuda(True, "device"))
        rays, pixels = on_cuda(False, "device"), on_cuda(True, "pinned")
        assert any("not built by the Triton kernel" in r and "direction maps would pass 8,388,608 pixels" in r
                   for r in rays) and not any("placement" in r for r in rays)
        assert any(r == "the training pixels are not on the device (data.placement pinned)" for r in pixels)
        assert not any("Triton kernel" in r for r in pixels)
    finally:
        trainer.close()


@pytest.mark.parametrize("cls, step_class, overrides", [
    (DataParallelTrainer, DataParallelStep, {}),
    (SubgridTrainer, SubgridStep, {"parallel__mode": "subgrid", "parallel__num_subgrids": 2}),
])
def test_a_distributed_trainer_runs_its_own_step(demo_scene, cls, step_class, overrides):
    trainer = cls(tiny_config(training__cuda_graphs="off", **overrides), load_scene(demo_scene))
    assert type(trainer.stepper) is step_class
    assert trainer.step_choice.kind == "dynamic"
    assert trainer.step_choice.reason == "1 rank: the distributed steps are not captured"
    assert (trainer.prefetcher is not None) == step_class.prefetches  # the subgrid step never prefetches
    trainer.close()


def test_distributed_steps_of_several_ranks_take_auto_or_dynamic():
    built = []

    def parallel_step(trainer):
        built.append(trainer)
        return "step"

    def ranks(mode: str):
        return types.SimpleNamespace(cfg=tiny_config(training__cuda_graphs=mode), world_size=4)

    for mode in ("on", "off"):
        with pytest.raises(ConfigError, match=rf"training.cuda_graphs: '{mode}' runs one process; distributed "
                                              "trainers take 'auto' or 'dynamic'"):
            choose_step(ranks(mode), parallel_step)
    assert built == []
    step, choice = choose_step(ranks("auto"), parallel_step)
    assert step == "step" and choice.reason == "4 ranks: the distributed steps are not captured"
    step, choice = choose_step(ranks("dynamic"), parallel_step)
    assert step == "step" and choice.reason == "training.cuda_graphs is 'dynamic'"


def _underscore_reach(path: Path) -> list[str]:
    """``x._name`` with ``x`` not ``self``/``cls``, and ``from trainer... import _name``, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainer"):
            found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno} reads .{node.attr}")
    return found


def test_the_trainer_and_its_steps_use_no_other_modules_underscore_names(tmp_path):
    found = [hit for module in STEP_MODULES for hit in _underscore_reach(REPO / module)]
    assert found == []
    probe = tmp_path / "probe.py"  # what the check finds
    probe.write_text("from trainer.train.loop import _hook\n\ndef f(tr):\n    self._ok = tr._backward\n")
    assert _underscore_reach(probe) == ["probe.py:1 imports _hook", "probe.py:4 reads ._backward"]

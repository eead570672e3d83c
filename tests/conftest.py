"""Suite-wide settings and the fixtures shared by several test folders.

One intra-op thread per test process.

The CI machine has 2 cores; with several processes (multi-rank tests) or any other load, OpenMP's
spinning threads slow small tensor ops by an order of magnitude. One thread keeps timings stable.
It also keeps results bit-reproducible: with two threads, CPU float reductions of one run can differ
from the next in the last bits, and the tests that compare two trainings exactly would fail. A test
that runs the trainer's command line in this process sets the rank's own thread count
(``trainer.cpu_threads``), so every test is put back to one thread afterwards.

The host counts as idle for the CPU thread rule (``TRAINER_HOST_LOAD=0``, inherited by the
processes the tests start): the machine is shared, and the counts a test reads must not follow
its load. The tests of the rule give the load they want.

Fixtures: ``demo_scene`` (the tiny demo scene), ``ring`` (cameras on a ring), ``trained_run`` (a
tiny trained model's run folder). Helpers live in ``tests/support``; a fixture used by one folder
only lives in that folder's conftest.py.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.scene_formats import ring_c2w
from tests.support.scenes import tiny_config, write_tiny_demo_scene
from trainer.contract.threads import LOAD_ENV

torch.set_num_threads(1)
os.environ[LOAD_ENV] = "0"


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """Each test starts and ends with one intra-op thread."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def demo_scene(tmp_path_factory) -> Path:
    """The tiny demo scene (``tests.support.scenes.write_tiny_demo_scene``), written once per session."""
    return write_tiny_demo_scene(tmp_path_factory.mktemp("demo") / "scene")


@pytest.fixture
def ring() -> np.ndarray:
    """[8, 4, 4] cameras on a ring looking at the origin (``tests.support.scene_formats.ring_c2w``)."""
    return ring_c2w()


TRAIN_STEPS = 80


@pytest.fixture(scope="session")
def trained_run(demo_scene, tmp_path_factory) -> dict:
    """One tiny model trained for 80 steps on the demo scene, kept as a run folder (config.json +
    a snapshot), with its own evaluation of the test views: ``run``, ``snapshot``, ``scene``,
    ``eval``, ``config``. Used by the render/export and viewer tests."""
    from trainer.contract.config import config_to_dict
    from trainer.contract.rundir import RunDir
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    run = RunDir(tmp_path_factory.mktemp("run") / "run").create()
    cfg = tiny_config(data__scene=str(demo_scene), training__n_steps=TRAIN_STEPS)
    trainer = Trainer(cfg, load_scene(demo_scene), None)
    trainer.train(n_steps=TRAIN_STEPS)
    run.write_json(run.config_path, config_to_dict(cfg))
    snapshot = trainer.save(run.snapshot_path(trainer.step))
    evaluation = trainer.evaluate(save_renders=False)
    trainer.close()
    return {"run": run.root, "snapshot": snapshot, "scene": demo_scene, "eval": evaluation, "config": cfg}

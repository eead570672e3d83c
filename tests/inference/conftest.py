"""Fixtures for render/export tests: one tiny model trained on the demo scene, kept as a run
folder (config.json + a snapshot), with its own evaluation of the test views."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.conftest import demo_scene, tiny_config  # noqa: F401  (demo_scene: fixture)

TRAIN_STEPS = 80


@pytest.fixture(scope="session")
def trained_run(demo_scene, tmp_path_factory) -> dict:  # noqa: F811
    from trainer.contract.config import config_to_dict
    from trainer.data import load_scene
    from trainer.contract.rundir import RunDir
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


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``python -m trainer.inference`` in-process: (exit code, stdout, stderr)."""
    from trainer.inference.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err

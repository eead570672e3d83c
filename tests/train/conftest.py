"""Fixtures for trainer tests: a tiny demo scene and a tiny CPU config."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.contract.config import TrainConfig, apply_overrides, load_config

TINY = {
    "encoding.n_levels": 4,
    "encoding.log2_hashmap_size": 12,
    "encoding.base_resolution": 8,
    "encoding.per_level_scale": 2.0,
    "encoding.backend": "torch",
    "network.n_neurons": 16,
    "rgb_network.n_neurons": 16,
    "training.device": "cpu",
    "training.target_samples_per_step": 4096,
    "training.initial_rays_per_step": 64,
    "training.max_rays_per_step": 2048,
    "training.occupancy_resolution": 16,
    "training.occupancy_warmup_steps": 16,
    "training.occupancy_update_every": 8,
    "training.log_every": 5,
    "training.max_march_steps": 256,
    "training.n_steps": 20,
}


def tiny_config(**overrides: object) -> TrainConfig:
    """The tiny CPU config plus dotted-key overrides (``training__seed=3`` → ``training.seed``)."""
    values = dict(TINY)
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return apply_overrides(load_config(None), values)


@pytest.fixture(scope="session")
def demo_scene(tmp_path_factory) -> Path:
    from trainer.data.demo import write_demo_scene

    return write_demo_scene(tmp_path_factory.mktemp("demo") / "scene", resolution=32, n_train=16, n_val=2, n_test=4)

"""The tiny CPU config and the tiny demo scene most tests train on, and their command-line forms."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.contract.config import TrainConfig, apply_overrides, config_to_dict, load_config

TINY = {
    "encoding.n_levels": 4,
    "encoding.n_features_per_level": 2,
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


def write_tiny_demo_scene(folder: Path) -> Path:
    """The demo scene at 32×32 pixels with 16 train, 2 val and 4 test views, written to ``folder``
    (the ``demo_scene`` fixture of tests/conftest.py)."""
    from trainer.data.demo import write_demo_scene

    return write_demo_scene(folder, resolution=32, n_train=16, n_val=2, n_test=4)


def tiny_config_file(tmp_path: Path) -> Path:
    """The tiny config (logging every 5 steps) as a JSON file with a ``//`` comment line: ``tmp_path/tiny.json``."""
    cfg = apply_overrides(load_config(None), dict(TINY, **{"training.log_every": 5}))
    text = "// tiny CPU config written by the test\n" + json.dumps(config_to_dict(cfg), indent=1)
    path = tmp_path / "tiny.json"
    path.write_text(text)
    return path


def tiny_flags() -> list[str]:
    """The tiny test config as ``--set KEY=VALUE`` flags for the command line."""
    flags = []
    for key, value in TINY.items():
        flags += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return flags

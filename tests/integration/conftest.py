"""The tiny study of the sweep tests (tests/integration/test_sweep*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.studies import write_study


@pytest.fixture
def tiny_study(tmp_path, demo_scene) -> Path:
    """A 3-trial random-sampler study of 20 steps on the tiny demo scene. Its parameter costs
    nothing on one rank (the gradient bucket size), and its trainer default (25 MiB) is one of its
    choices, so the default trial takes it."""
    params = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'
    return write_study(tmp_path / "tiny.toml", scene=demo_scene, params=params)

"""Fixtures for viewer tests: the tiny trained run of the render tests (a run folder with
config.json and a snapshot of a model trained on the demo scene)."""

from tests.inference.conftest import trained_run  # noqa: F401  (fixture)
from tests.train.conftest import demo_scene  # noqa: F401  (fixture)

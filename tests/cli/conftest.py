from tests.train.conftest import demo_scene  # noqa: F401  (the shared tiny demo scene fixture)

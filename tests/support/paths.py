"""Where the tests find the repository and the shared data."""

from pathlib import Path

#: The repository root (the folder holding ``trainer/``, ``ngptune/`` and ``tests/``).
REPO = Path(__file__).resolve().parents[2]
#: ``../shared/data`` beside the repository: the real scenes (fox, ...), absent on some machines.
SHARED_DATA = REPO.parent / "shared" / "data"

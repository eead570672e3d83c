"""Where the tests find the repository and the shared data."""

from pathlib import Path

#: The repository root (the folder holding ``trainer/``, ``ngptune/`` and ``tests/``).
REPO = Path(__file__).resolve().parents[2]
#: ``../shared/data`` beside the repository: the real scenes (fox, ...), absent on some machines.
SHARED_DATA = REPO.parent / "shared" / "data"


def repo_python_path() -> str:
    """``PYTHONPATH`` for a child Python that imports this repository: the repository first, then
    the entries the tests were given (e.g. a folder of carried wheels on a GPU host)."""
    import os

    given = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(REPO), *[entry for entry in given.split(os.pathsep) if entry]])

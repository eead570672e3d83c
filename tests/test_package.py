"""The packages resolve to this repository (an unrelated PyPI package is also called ``trainer``)."""

from pathlib import Path

from tests.support.paths import REPO


def test_import_trainer_resolves_to_this_repository():
    import trainer

    assert Path(trainer.__file__).resolve().parent == REPO / "trainer"


def test_import_ngptune_resolves_to_this_repository():
    import ngptune

    assert Path(ngptune.__file__).resolve().parent == REPO / "ngptune"


def test_trainer_never_imports_ngptune():
    offenders = []
    for path in (REPO / "trainer").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "import ngptune" in text or "from ngptune" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []

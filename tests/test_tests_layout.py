"""The tests' own layout, read from the source: a test module sits in the folder that mirrors the
source package it tests (``tests/trainer/<package>/``, ``tests/ngptune/<package>/``, ``tests/bench/``)
or in ``tests/integration/`` (several processes end to end through the command line); helpers live
in ``tests/support/`` and tests import only those, never another test module or a conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

TESTS = REPO / "tests"
#: Top folders of tests/ that mirror a source tree of the repository.
MIRRORED = ("trainer", "ngptune", "bench")


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, function-local ones included: ``import X`` gives
    ``X``; ``from X import Y`` gives ``X.Y`` (Y may be a module); relative imports are resolved
    against the file's package."""
    package = list(path.relative_to(REPO).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _is_test_module(path: Path) -> bool:
    return path.name.startswith("test_")


def test_tests_import_only_the_support_helpers():
    offenders = []
    for path in _python_files():
        for line, module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == "tests" and parts[:2] != ["tests", "support"]:
                offenders.append(f"{path.relative_to(REPO)}:{line}: {module}")
            elif "conftest" in parts or any(part.startswith("test_") for part in parts):
                offenders.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert offenders == []  # from tests.support.<concern> import ...; fixtures come from conftest.py files


def test_each_test_folder_mirrors_a_source_package_or_is_integration():
    misplaced = []
    for path in _python_files():
        if not _is_test_module(path):
            continue
        folder = path.parent.relative_to(TESTS)
        if folder == Path(".") or folder == Path("integration"):
            continue
        if folder.parts[0] not in MIRRORED or not (REPO / folder).is_dir():
            misplaced.append(str(path.relative_to(REPO)))
    assert misplaced == []  # tests/<source folder>/test_<module>.py, or tests/integration/


def test_helpers_live_in_support_and_support_holds_no_tests():
    misplaced = []
    for path in _python_files():
        folder = path.parent.relative_to(TESTS)
        in_support = folder.parts[:1] == ("support",)
        if in_support and _is_test_module(path):
            misplaced.append(f"{path.relative_to(REPO)}: a test module in tests/support")
        elif not in_support and not _is_test_module(path) and path.name not in ("__init__.py", "conftest.py"):
            misplaced.append(f"{path.relative_to(REPO)}: a helper outside tests/support")
    assert misplaced == []


def test_every_test_folder_is_a_package():
    # Test files of one name in two folders (test_appearance.py) import as tests.<folder>.<name>.
    folders = {p.parent for p in _python_files()}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []

"""The packages' layering, read from the source (every import, function-local ones included):
the driver reaches the trainer only through ``trainer.contract``, the trainer never imports the
driver, ``import trainer.contract`` loads no torch, and no package imports a higher one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``: ``import X`` gives ``X``, ``from X import Y``
    gives ``X`` (and ``X.Y`` for ``from trainer import Y``, which names a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in ("trainer", "ngptune"):
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_the_driver_imports_only_the_contract_of_the_trainer():
    offenders = [f"{path.relative_to(REPO)}:{line}: {module}"
                 for path in _modules("ngptune") for line, module in _imports(path)
                 if module.split(".")[0] == "trainer" and module != "trainer.contract"]
    assert offenders == []  # the face only: from trainer.contract import ...


def test_the_trainer_never_imports_the_driver():
    offenders = [f"{path.relative_to(REPO)}:{line}: {module}"
                 for path in _modules("trainer") for line, module in _imports(path)
                 if module.split(".")[0] == "ngptune"]
    assert offenders == []


def test_the_contract_imports_nothing_else_of_the_trainer():
    offenders = [f"{path.relative_to(REPO)}:{line}: {module}"
                 for path in _modules("trainer/contract") for line, module in _imports(path)
                 if module.split(".")[0] == "trainer" and module.split(".")[:2] != ["trainer", "contract"]]
    assert offenders == []


_LOADED = "import json, sys; import {module}; print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"


@pytest.mark.parametrize("module", ["trainer.contract", "ngptune.cli"])
def test_importing_the_contract_loads_no_torch(module):
    heavy = ("torch", "numpy", "pandas", "optuna")
    out = subprocess.run([sys.executable, "-c", _LOADED.format(module=module, heavy=heavy)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


# ngptune's packages, lowest first: a package imports only those before it (and itself).
DRIVER_LAYERS = (
    ("ngptune.errors", "ngptune.console", "ngptune.processes", "ngptune.scheduling"),
    ("ngptune.commbench",),
    ("ngptune.profiling",),
    ("ngptune.reporting",),
    ("ngptune.tuning",),
)


def _driver_layer(module: str) -> int | None:
    for index, layer in enumerate(DRIVER_LAYERS):
        if any(module == name or module.startswith(name + ".") for name in layer):
            return index
    return None


def test_driver_packages_import_only_lower_layers():
    offenders = []
    for path in _modules("ngptune"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        own = _driver_layer(name)
        if own is None:
            continue  # the command modules at the top level may import every layer
        for line, module in _imports(path):
            other = _driver_layer(module)
            if other is not None and other > own:
                offenders.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert offenders == []

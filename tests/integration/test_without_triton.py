"""Triton is an optional fast path: with ``triton`` unimportable every module outside the Triton
kernel modules imports, and ``ngptune train`` trains, evaluates and writes its snapshot."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO
from tests.support.scenes import TINY

# ``sys.modules["triton"] = None`` makes every ``import triton`` raise ImportError, as on a machine
# where the package is not installed.
NO_TRITON = "import sys; sys.modules['triton'] = None; sys.modules['triton.language'] = None; "


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TRITON + code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_every_module_but_the_kernels_imports_without_triton():
    code = (
        "import importlib, json, pkgutil, trainer, ngptune\n"
        "failed = []\n"
        "for package in (trainer, ngptune):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        leaf = info.name.rsplit('.', 1)[-1]\n"
        "        if leaf.startswith('triton_') or leaf == '__main__':\n"
        "            continue\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except Exception as error:\n"
        "            failed.append(f'{info.name}: {error!r}')\n"
        "print(json.dumps(failed))\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_ngptune_train_runs_without_triton(demo_scene, tmp_path):
    out = tmp_path / "run"
    overrides = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]
    code = "import runpy; sys.argv[0] = 'ngptune'; runpy.run_module('ngptune', run_name='__main__')"
    proc = _python(code, "train", "--scene", str(demo_scene), "--n-steps", "6", "--eval-max-images", "1",
                   "--out", str(out), "--quiet", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "triton" not in proc.stderr.lower()
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 6
    assert json.loads((out / "eval.json").read_text())["images"]

"""How many CUDA devices torch would see here, counted without importing torch when possible.

A launcher decides the default config (the CPU preset), the device it names and the backend its
ranks will choose from this count before any rank starts; importing torch for it costs seconds.
:func:`cuda_device_count` answers like ``torch.cuda.device_count()``:

* torch already imported in this process: torch's own count;
* torch built without CUDA (``torch/version.py`` says ``cuda = None`` and ``hip = None``): 0;
* a CUDA build: the CUDA driver's count (``cuInit`` and ``cuDeviceGetCount`` of ``libcuda.so.1``
  through ctypes, ``CUDA_VISIBLE_DEVICES`` applies), 0 without a driver or without a device;
* anything else (a ROCm build, a driver error, torch's files not found): torch's count after all.

Stdlib only (torch only in the last case).
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import sys
from pathlib import Path

__all__ = ["cuda_device_count", "torch_build"]

_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100


def torch_build() -> dict[str, str | None] | None:
    """``{"cuda": ..., "hip": ...}`` from the installed torch's ``version.py`` (a version string or
    None each), read without importing torch; None when it cannot be found or read."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict[str, str | None] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if value is not None and not isinstance(value, str):
                return None
            found[target.id] = value
    return found if set(found) == {"cuda", "hip"} else None


def _driver_count() -> int | None:
    """Devices the CUDA driver shows this process (0 without a driver or a device); None on any
    other driver error."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    try:
        status = lib.cuInit(0)
        if status == _CUDA_ERROR_NO_DEVICE:
            return 0
        if status != _CUDA_SUCCESS:
            return None
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != _CUDA_SUCCESS:
            return None
    except AttributeError:
        return None
    return int(count.value)


def _torch_count() -> int:
    from trainer.parallel.dist_env import visible_cuda_devices

    return visible_cuda_devices()


def cuda_device_count() -> int:
    """The CUDA devices ``torch.cuda.device_count()`` reports in this environment (module
    docstring for how it is counted); >= 0."""
    if "torch" in sys.modules:
        return _torch_count()
    build = torch_build()
    if build is None or build["hip"] is not None:
        return _torch_count()
    if build["cuda"] is None:
        return 0
    count = _driver_count()
    return _torch_count() if count is None else count

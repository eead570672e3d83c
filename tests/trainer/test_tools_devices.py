"""``python -m trainer.tools.devices``: the CUDA devices torch sees, counted without importing torch
where the build and the driver answer (the sweep asks it once before its first trial; a CPU build
of torch is 0 at once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

_RUN = """
import json, sys
from trainer.tools.devices import main
main()
print(json.dumps({"torch_imported": "torch" in sys.modules}))
"""


def test_the_tool_counts_as_torch_does_without_importing_it() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answer, imports = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert answer == {"cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    if torch.version.cuda is None and torch.version.hip is None:  # a CPU build: 0 from its version file
        assert imports == {"torch_imported": False}

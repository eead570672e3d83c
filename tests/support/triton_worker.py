"""Running a Triton test module's observations in Triton's CPU interpreter.

``TRITON_INTERPRET=1`` is read when ``@triton.jit`` wraps a kernel, and another test may already
have imported the kernel modules without it, so the interpreter cases run in a fresh subprocess:
``python <test file> <seed>`` must print its observations as JSON on its last line; the test then
asserts on them. Seeds are fresh random draws unless ``NGPTUNE_TEST_SEED`` replays one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.support.paths import REPO, repo_python_path


def random_seed() -> int:
    """``NGPTUNE_TEST_SEED`` or a fresh random seed."""
    return int(os.environ.get("NGPTUNE_TEST_SEED", str(int.from_bytes(os.urandom(3), "little"))))



def observe_in_interpreter(test_file: str, seed: int, timeout_s: float = 600) -> Any:
    """Run ``test_file`` as a script under the interpreter; return its JSON observations.

    Raises:
        AssertionError: the worker failed (its stderr tail and the seed in the message).
    """
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": repo_python_path()}
    proc = subprocess.run([sys.executable, test_file, str(seed)], capture_output=True, text=True, env=env,
                          timeout=timeout_s, cwd=REPO)
    assert proc.returncode == 0, f"seed {seed}: worker failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])

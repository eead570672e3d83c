"""Running a Triton test module's observations in Triton's CPU interpreter.

``TRITON_INTERPRET=1`` is read when ``@triton.jit`` wraps a kernel, and another test may already
have imported the kernel modules without it, so the interpreter cases run in a fresh subprocess:
``python <test file> <seed>`` must print its observations as JSON on its last line; the test then
asserts on them. Seeds are fresh random draws unless ``NGPTUNE_TEST_SEED`` replays one.
"""

from __future__ import annotations

import functools
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


PROGRAM_LOOP_PROBE = """
import torch, triton, triton.language as tl

@triton.jit
def tiles(out, n_tiles):
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        tl.store(out + tile, 1.0)

out = torch.zeros(4)
tiles[(2,)](out, 4)
assert out.tolist() == [1.0] * 4, out
"""


@functools.lru_cache(maxsize=1)
def interpreter_lacks_program_loops() -> str | None:
    """Why this Triton's interpreter cannot run a kernel whose loop starts at its program id and
    steps by the number of programs (the persistent loops of the fused MLP kernels), or None
    when it can. Triton 3.6's interpreter fails there ("only 0-dimensional arrays can be
    converted to Python scalars"); GPU compilation of the same kernels is unaffected."""
    import triton

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": repo_python_path()}
    proc = subprocess.run([sys.executable, "-c", PROGRAM_LOOP_PROBE], capture_output=True, text=True, env=env,
                          timeout=120, cwd=REPO)
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return f"Triton {triton.__version__}'s interpreter cannot run a loop over program ids ({last[:160]})"


def skip_without_program_loops() -> None:
    """Skip the calling test when :func:`interpreter_lacks_program_loops` (its reason given)."""
    import pytest

    lacking = interpreter_lacks_program_loops()
    if lacking:
        pytest.skip(lacking)

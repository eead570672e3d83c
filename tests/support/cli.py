"""Running the commands as a test does: ``python -m trainer.inference`` in this process, ``ngptune
sweep`` (or any command) as a process in the repository."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO

#: ``ngptune sweep`` as a command line.
SWEEP = [sys.executable, "-m", "ngptune", "sweep"]


def run_command(cmd: list, timeout_s: float = 400) -> subprocess.CompletedProcess:
    """Run ``cmd`` (each item made a string) in the repository, its output captured as text.

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` seconds.
    """
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout_s, cwd=REPO)


def run_inference_cli(argv: list, capsys) -> tuple[int, str, str]:
    """``python -m trainer.inference`` in-process: (exit code, stdout, stderr)."""
    from trainer.inference.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def first_statement(text: str) -> tuple[str, int]:
    """The first statement of a command's output (its first line and the lines after it that
    start with two spaces, as ``fit_lines`` breaks it) on one line, and how many lines it took."""
    from trainer.contract.textlines import CONTINUATION, joined

    lines = text.splitlines()
    n = 1
    while n < len(lines) and lines[n].startswith(CONTINUATION):
        n += 1
    return joined(lines[:n]), n


def deepest_bracket(text: str) -> int:
    """How deep round brackets nest in ``text``: 0 without any, 1 for ``a (b) (c)``, 2 for
    ``a (b (c))``."""
    depth = deepest = 0
    for char in text:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(depth - 1, 0)
    return deepest

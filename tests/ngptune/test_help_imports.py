"""``ngptune --help`` and every sub-command's ``--help`` answer without loading the heavy
libraries (torch, optuna, plotly, pandas): the parsers import them only where a command runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

from tests.support.paths import REPO

HEAVY = ("torch", "optuna", "plotly", "pandas")

# Runs one --help in a fresh interpreter and prints which heavy modules it had loaded.
_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
if argv[0] == "trainer":
    from trainer.launch_cli import main
    argv = argv[1:]
else:
    from ngptune.cli import main
try:
    main(argv)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)))
""".replace("{heavy}", repr(HEAVY))


def _loaded_by(argv: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _subcommands() -> list[str]:
    from ngptune.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


@pytest.mark.parametrize("argv", [["--help"], ["trainer", "--help"]] + [[name, "--help"] for name in _subcommands()],
                         ids=lambda argv: " ".join(argv))
def test_help_loads_no_heavy_module(argv: list[str]) -> None:
    assert _loaded_by(argv) == []

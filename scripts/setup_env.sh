#!/usr/bin/env bash
# Create the project's virtual environment and install ngptune into it, with the given extras
# (default: those of every command, as make demo and make setup install them; make test adds "test").
# Reuses an installed torch >= 2.4 (GPU hosts ship one), else installs the CPU build torch==2.13.0
# in the same pip run as ngptune (one resolution instead of two).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-.venv}
extras=${2:-colmap,view,tensorboard,dashboard}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
# the installed torch's version, read from its metadata without importing it (that takes seconds)
found=$("$py" - <<'PY'
from importlib.metadata import PackageNotFoundError, version
try:
    print(version("torch"))
except PackageNotFoundError:
    pass
PY
)
torch_req=()
if [ -n "$found" ] && "$py" - "$found" <<'PY'
import sys
major, minor = (int(p) for p in sys.argv[1].split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 4) else 1)
PY
then
  echo "setup: reusing torch $found"
else
  echo "setup: installing torch==2.13.0"
  torch_req=(torch==2.13.0)
fi
"$py" -m pip install -q ${torch_req[@]+"${torch_req[@]}"} -e "$root[$extras]"
# Byte-compile the project's own packages as pip does those it installs (an editable install
# compiles nothing): a process then reads them instead of compiling each module it imports, which
# it does at every start where PYTHONDONTWRITEBYTECODE is set (each rank of each sweep trial).
"$py" -m compileall -q "$root/trainer" "$root/ngptune" >/dev/null

#!/usr/bin/env bash
# Create the project's virtual environment and install ngptune into it.
# Reuses an installed torch >= 2.4 (GPU hosts ship one), else installs the CPU build torch==2.13.0.
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
if "$py" - <<'PY'
import sys
try:
    import torch
except Exception:
    sys.exit(1)
major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 4) else 1)
PY
then
  echo "setup: reusing torch $("$py" -c 'import torch; print(torch.__version__)')"
else
  echo "setup: installing torch==2.13.0"
  "$py" -m pip install -q torch==2.13.0
fi
"$py" -m pip install -q -e '.[test,colmap,view,tensorboard,dashboard]'

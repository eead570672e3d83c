# Sourced by bench/gpu_session_*.sh on the device machine (repo root): NCCL multicast off, the carried
# wheels (.whl, when carried) installed into /tmp/site, $out for what comes back, $S the scene, $t0 the start time,
# and pack, which puts /tmp/keep into one tarball (only a few files per call come back).
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then  # optuna/plotly are needed by sweeps only
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/keep
S=.scenes/lego_400
t0=$(date +%s)
pack() { tar -C /tmp/keep -czf "$out/keep.tgz" . ; }

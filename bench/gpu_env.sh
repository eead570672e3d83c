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
# alternate_train_step TAG VARIANT_A VARIANT_B: bench/train_step.py (warm-up 2000, 500 steps) twice
# for each variant, A B A B on this host ("" = the defaults); outputs in /tmp/keep/train_step_TAG.txt.
alternate_train_step() {
  local tag=$1 round v; shift
  for round in 1 2; do
    for v in "$@"; do
      echo "== round $round ${v:-defaults}"
      (cd bench && timeout 70 python3 train_step.py --scene ../$S --warmup 2000 --steps 500 $v 2>&1) \
        | grep -v "^\s*$" | tee -a "/tmp/keep/train_step_$tag.txt" | sed -n 4p
    done
  done
}

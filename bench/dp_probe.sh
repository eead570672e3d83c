#!/usr/bin/env bash
# DP scaling probe on 2 GPUs: phase means for variants, traces of default runs.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
S=.scenes/lego_400
run() { name=$1; shift; python3 -m ngptune train --scene $S --n-steps 100000 --time-budget 20 --no-eval --quiet --out /tmp/runs/$name "$@" > /tmp/runs_$name.log 2>&1 || tail -5 /tmp/runs_$name.log;
  cp /tmp/runs/$name/metrics*.jsonl $OUT/ 2>/dev/null; for f in /tmp/runs/$name/metrics*.jsonl; do cp $f $OUT/${name}_$(basename $f); done
  for f in /tmp/runs/$name/traces/*.json; do [ -f $f ] && gzip -c $f > $OUT/${name}_$(basename $f).gz; done; }
mkdir -p /tmp/runs
run one --set 'profile.trace_steps="600:603"'
run dp --nproc-per-node 2 --set 'profile.trace_steps="600:603"'
run dp_bf16 --nproc-per-node 2 --set 'parallel.compression="bf16"'
run dp_nooverlap --nproc-per-node 2 --set 'parallel.overlap_comm=false'
rm -f $OUT/metrics*.jsonl
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"]
for f in sorted(glob.glob(f"{out}/*metrics*.jsonl")):
    rs = [json.loads(l) for l in open(f)][2:]
    if not rs: continue
    keys = ["step_time_ms","data_ms","march_ms","field_forward_ms","render_ms","backward_ms","comm_ms","optimizer_ms","occupancy_update_ms","balance_ms","other_ms"]
    m = {k: sum(r.get(k,0) or 0 for r in rs)/len(rs) for k in keys}
    thr = sum(r["throughput_samples_per_s"] for r in rs)/len(rs)
    print(os.path.basename(f), f"thr={thr/1e6:.2f}M", " ".join(f"{k[:-3]}={v:.2f}" for k,v in m.items()), "imb=%.3f" % (sum(r.get("imbalance",1) or 1 for r in rs)/len(rs)))
PY
ls -la $OUT

#!/usr/bin/env bash
# Device call I on 2×H200 (session 3): a subgrid K=2 profile, then two data-parallel weak-scaling rounds.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 120 python3 -m ngptune profile --scene $S --nproc-per-node 2 --steps 300 --trace-steps 200:203 \
  --set parallel.mode=subgrid --set parallel.num_subgrids=2 --out /tmp/prof_sub 2>&1 | tail -12
mkdir -p /tmp/keep/prof_sub; cp /tmp/prof_sub/*.csv /tmp/prof_sub/report.html /tmp/keep/prof_sub/ 2>/dev/null; pack
echo "profile done at +$(( $(date +%s) - t0 )) s"
cd bench
for r in 1 2; do
  timeout 100 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --time-budget 20 --out /tmp/scal_i$r 2>&1 | tail -3
done
echo "all done at +$(( $(date +%s) - t0 )) s"

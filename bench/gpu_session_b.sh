#!/usr/bin/env bash
# Device call B on 2×H200: the parallel study, instrumentation overhead (1 GPU), weak scaling 1→2 GPUs,
# 2-GPU profiles (NVLink, sockets). Everything worth keeping goes into one tarball (few files come back).
source "$(dirname "$0")/gpu_env.sh"
timeout 300 python3 -m ngptune sweep --study studies/parallel.toml --scene $S --timeout 265 --out /tmp/parallel 2>&1 | tail -40
mkdir -p /tmp/keep/parallel; cp /tmp/parallel/report.html /tmp/parallel/trials.csv /tmp/parallel/best_config.json /tmp/parallel/best_env.sh /tmp/keep/parallel/ 2>/dev/null; pack
echo "parallel sweep done at +$(( $(date +%s) - t0 )) s"
for ic in nvlink sockets; do
  timeout 80 python3 -m ngptune profile --scene $S --nproc-per-node 2 --steps 300 --trace-steps 200:203 --emulate-interconnect $ic --out /tmp/prof_$ic 2>&1 | tail -3
  mkdir -p /tmp/keep/prof_$ic; cp /tmp/prof_$ic/*.csv /tmp/prof_$ic/*.json /tmp/prof_$ic/report.html /tmp/keep/prof_$ic/ 2>/dev/null
done; pack
echo "profiles done at +$(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 bench/profile_overhead.py --scene $S --time-budget 18 --rounds 1 --out /tmp/ovh 2>&1 | tail -8
echo "overhead done at +$(( $(date +%s) - t0 )) s"
cd bench && timeout 110 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --time-budget 20 --eval-images 10 --out /tmp/scaling 2>&1 | tail -8
cp /tmp/scaling/scaling.json /tmp/keep/ 2>/dev/null; pack
echo "all done at +$(( $(date +%s) - t0 )) s"

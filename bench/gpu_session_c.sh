#!/usr/bin/env bash
# Device call C on 2×H200: the parallel study (12 trials), then the instrumentation overhead on one GPU.
source "$(dirname "$0")/gpu_env.sh"
timeout 290 python3 -m ngptune sweep --study studies/parallel.toml --scene $S --timeout 275 --out /tmp/parallel 2>&1 | tail -32
mkdir -p /tmp/keep/parallel; cp /tmp/parallel/report.html /tmp/parallel/trials.csv /tmp/parallel/best_config.json /tmp/parallel/best_env.sh /tmp/keep/parallel/ 2>/dev/null; pack
echo "parallel sweep done at +$(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES=0 timeout 110 python3 bench/profile_overhead.py --scene $S --time-budget 12 --rounds 3 --out /tmp/ovh 2>&1 | grep -v "NVML sampler" | tail -8
echo "all done at +$(( $(date +%s) - t0 )) s"

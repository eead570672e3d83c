#!/usr/bin/env bash
# Device call E on 2×H200 (session 3): data-parallel weak and strong scaling (two weak rounds),
# then the instrumentation overhead on one GPU (three rounds).
source "$(dirname "$0")/gpu_env.sh"
(cd bench && timeout 230 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --scaling weak,strong \
   --time-budget 20 --out /tmp/scal1 2>&1 | tail -8)
echo "scaling round 1 done at +$(( $(date +%s) - t0 )) s"
(cd bench && timeout 110 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --time-budget 20 --out /tmp/scal2 2>&1 | tail -5)
echo "scaling round 2 done at +$(( $(date +%s) - t0 )) s"
for r in scal1 scal2; do for d in /tmp/$r/*/; do mkdir -p /tmp/keep/$r/$(basename $d); cp $d/metrics*.jsonl /tmp/keep/$r/$(basename $d)/ 2>/dev/null; done; cp /tmp/$r/scaling.json /tmp/keep/$r/ 2>/dev/null; done
pack
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 bench/profile_overhead.py --scene $S --time-budget 12 --rounds 3 --out /tmp/ovh 2>&1 | grep -v "NVML sampler" | tail -10
echo "all done at +$(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Device call G on 2×H200 (session 3): 60 s runs with evaluation — data parallel on 1 and 2 GPUs
# (weak scaling, time to 33 dB) and subgrid K=2 on 2 GPUs (PSNR at equal wall time).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
cd bench
timeout 250 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --psnr --eval-every 1000 --eval-images 20 \
  --time-budget 60 --out /tmp/psnr_data 2>&1 | tail -5
echo "data runs done at +$(( $(date +%s) - t0 )) s"
timeout 150 python3 scaling.py --scene ../$S --gpus 2 --modes subgrid --psnr --eval-images 20 \
  --time-budget 60 --out /tmp/psnr_sub 2>&1 | tail -4
for r in psnr_data psnr_sub; do for d in /tmp/$r/*/; do mkdir -p /tmp/keep/$r/$(basename $d); cp $d/metrics*.jsonl $d/eval.json /tmp/keep/$r/$(basename $d)/ 2>/dev/null; done; cp /tmp/$r/scaling.json /tmp/keep/$r/; done
cd .. && pack
echo "all done at +$(( $(date +%s) - t0 )) s"

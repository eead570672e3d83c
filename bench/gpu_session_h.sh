#!/usr/bin/env bash
# Device call H on 2×H200 (session 3): the parallel study (12 trials), then test PSNR at equal steps
# with and without march prefetch and sub-pixel jitter (one GPU).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 320 python3 -m ngptune sweep --study studies/parallel.toml --scene $S --trials 12 --timeout 300 --out /tmp/parallel 2>&1 | tail -30
mkdir -p /tmp/keep/parallel; cp /tmp/parallel/report.html /tmp/parallel/trials.csv /tmp/parallel/best_config.json /tmp/parallel/best_env.sh /tmp/keep/parallel/ 2>/dev/null; pack
echo "parallel sweep done at +$(( $(date +%s) - t0 )) s"
cd bench && CUDA_VISIBLE_DEVICES=0 timeout 230 python3 psnr_at_steps.py --scene ../$S --steps 3000 --eval-every 1000 --eval-images 20 \
  --variant base --variant no_prefetch:training.prefetch_march=false --variant no_jitter:training.subpixel_jitter=false \
  --set training.quiet=true 2>&1 | grep -v "^base:\|^no_" | tail -8
echo "all done at +$(( $(date +%s) - t0 )) s"

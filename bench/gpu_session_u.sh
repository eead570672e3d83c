#!/usr/bin/env bash
# Device call U on one H200 (session 6, issue 7): 180 s of compacted training (L2, decay from step
# 10000 every 5000) scored with instant-ngp's 8 renders per view, then where the remaining test
# error lies (bench/error_breakdown.py: background, silhouette, interior pixels). Metrics (training
# PSNR) and four renders come back.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
bash bench/gpu_time_to_psnr.sh compact_spp8 "--set optimizer.decay_start=10000 --set optimizer.decay_interval=5000 --set training.eval_spp=8" >/dev/null
tail -14 /tmp/keep/time_to_psnr_compact_spp8.txt
( cd bench && timeout 120 python3 error_breakdown.py --scene ../$S --renders /tmp/ttp_compact_spp8/renders 2>&1 \
  | tee /tmp/keep/error_breakdown_compact_spp8.txt )
for i in 000 050 100 150; do cp /tmp/ttp_compact_spp8/renders/test_$i.png /tmp/keep/ 2>/dev/null; done
echo "+$(( $(date +%s) - t0 )) s"
pack

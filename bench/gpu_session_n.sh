#!/usr/bin/env bash
# Device call N on one H200 (session 4, issue 7): time to PSNR on lego_400 with the weight EMA
# (optimizer.ema_decay 0.95, instant-ngp's) that evaluation now renders with.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/train/test_ema.py 2>&1 | tail -2
cd bench
timeout 330 python3 time_to_psnr.py --scene ../$S --budget-s 180 --eval-every-s 20 --set optimizer.ema_decay=0.95 \
  --out /tmp/ttp_ema 2>&1 | grep -v "^\s*$" | tee /tmp/keep/time_to_psnr_ema.txt | tail -24
cp /tmp/ttp_ema/time_to_psnr.json /tmp/keep/time_to_psnr_ema.json 2>/dev/null
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

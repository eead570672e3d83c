#!/usr/bin/env bash
# Device call Z on one H200 (session 7, issue 7): the view-dependence hypothesis of session 6 (test-only
# speckles = colour extrapolated to unseen view directions) at equal steps: SH degree 4 (instant-ngp),
# 3, 2 and 1 (view-independent colour), each scored on 20 test views with 1 and 8 renders and on 20
# training views.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
cd bench
timeout 560 python3 psnr_at_steps.py --scene ../$S --steps 8000 --eval-every 8000 --eval-images 20 \
  --eval-spp 1,8 --eval-train 20 --variant base --variant sh3:dir_encoding.degree=3 \
  --variant sh2:dir_encoding.degree=2 --variant sh1:dir_encoding.degree=1 2>&1 | grep -v "^\s*$" \
  | tee /tmp/keep/psnr_sh_degree_z.txt | tail -20
echo "+$(( $(date +%s) - t0 )) s"
pack

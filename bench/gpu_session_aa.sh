#!/usr/bin/env bash
# Device call AA on one H200 (session 8, issue 7): the fused MLP on/off alternated once more (call Y's
# first round was noisy), then time to PSNR with the defaults and only N_max = 512 changed (call Z and
# the session-8 time_to_psnr runs found 512 best of 2048/1024/512/256 on lego_400).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
alternate_train_step aa "" "--set training.mlp_backend=triton"
echo "+$(( $(date +%s) - t0 )) s"
cd bench
timeout 280 python3 time_to_psnr.py --scene ../$S --budget-s 180 --eval-every-s 20 --out /tmp/ttp_d512 \
  --set encoding.max_resolution=512 2>&1 | grep -v "^\s*$" | tee /tmp/keep/time_to_psnr_defaults_nmax512.txt | tail -24
cp /tmp/ttp_d512/time_to_psnr.json /tmp/keep/time_to_psnr_defaults_nmax512.json 2>/dev/null
echo "+$(( $(date +%s) - t0 )) s"
pack

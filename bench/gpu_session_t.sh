#!/usr/bin/env bash
# Device call T on one H200 (session 6, issue 7): GPU tests of compaction after the padding fix, the
# compacted step's steps/s and phases, device time per kernel (where the backward goes), then at
# equal steps the quality question: is the ~34.3 dB plateau under- or over-fitting (train vs test
# views), and what do sub-pixel jittered training rays give under instant-ngp's 8 renders per view.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/render/test_compact.py tests/train/test_compaction.py \
  tests/render/test_triton_volrend.py 2>&1 | tail -2
cd bench
timeout 70 python3 train_step.py --scene ../$S 2>&1 | grep -v "^\s*$" | tee /tmp/keep/train_step_t.txt | sed -n 1,18p
# later in training (rays per step grow as surfaces sharpen)
timeout 80 python3 train_step.py --scene ../$S --warmup 4000 2>&1 | grep -v "^\s*$" | tee /tmp/keep/train_step_t4000.txt | sed -n 1,18p
echo "+$(( $(date +%s) - t0 )) s"
timeout 70 python3 launch_count.py --scene ../$S --warmup 800 --top 25 2>&1 | grep -v "^\s*$" \
  | tee /tmp/keep/launch_count_t.txt | tail -32
echo "+$(( $(date +%s) - t0 )) s"
timeout 320 python3 psnr_at_steps.py --scene ../$S --steps 8000 --eval-every 4000 --eval-images 20 \
  --eval-spp 1,8 --eval-train 20 --variant base --variant jitter:training.subpixel_jitter=true 2>&1 \
  | grep -v "^\s*$" | tee /tmp/keep/psnr_at_steps_t.txt | tail -14
echo "+$(( $(date +%s) - t0 )) s"
pack

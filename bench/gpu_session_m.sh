#!/usr/bin/env bash
# Device call M on one H200 (session 4, issue 7): GPU checks of the Triton march/SH/compositing
# kernels and of the step using them, launches per step, steps/s, then time to PSNR on lego_400.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/render/test_triton_march.py tests/render/test_triton_volrend.py \
  tests/encoding/test_triton_sh.py tests/train/test_kernel_backends.py 2>&1 | tail -6
echo "gpu tests done at +$(( $(date +%s) - t0 )) s"
cd bench
timeout 100 python3 launch_count.py --scene ../$S --top 30 2>&1 | grep -v "^\s*$" | tee /tmp/keep/launch_count.txt | head -14
for r in 1 2; do
  timeout 100 python3 train_step.py --scene ../$S 2>&1 | grep -v "^\s*$" | tee /tmp/keep/train_step_$r.txt | tail -15
done
echo "train_step done at +$(( $(date +%s) - t0 )) s"; pack
timeout 330 python3 time_to_psnr.py --scene ../$S --budget-s 180 --eval-every-s 20 --out /tmp/ttp 2>&1 | grep -v "^\s*$" | tee /tmp/keep/time_to_psnr.txt | tail -25
cp /tmp/ttp/*.json /tmp/keep/ 2>/dev/null
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

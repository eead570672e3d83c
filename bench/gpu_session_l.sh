#!/usr/bin/env bash
# Device call L on one H200 (session 4, issue 7): the new Triton marcher and SH kernel checked at full
# size, launches per step, steps/s of the full step, then compiled compositing/loss as candidates.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/render/test_triton_march.py tests/encoding/test_triton_sh.py \
  tests/encoding/test_triton_hashgrid.py 2>&1 | tail -6
echo "gpu tests done at +$(( $(date +%s) - t0 )) s"
cd bench
timeout 100 python3 launch_count.py --scene ../$S --top 40 2>&1 | grep -v "^\s*$" | tee /tmp/keep/launch_count.txt | head -40
echo "launch count done at +$(( $(date +%s) - t0 )) s"; pack
for mb in triton torch; do
  timeout 100 python3 train_step.py --scene ../$S --set training.march_backend=$mb 2>&1 | grep -v "^\s*$" | tee /tmp/keep/train_step_$mb.txt | tail -16
done
echo "train_step done at +$(( $(date +%s) - t0 )) s"; pack
timeout 240 python3 step_variants.py --scene ../$S 2>&1 | grep -v "^\s*$" | tee /tmp/keep/step_variants.txt | tail -10
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

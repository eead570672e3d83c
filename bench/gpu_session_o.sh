#!/usr/bin/env bash
# Device call O on one H200 (session 4, issue 7): box intersection and jitter moved into the march
# kernel; GPU checks, launches per step, two steps/s rounds.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/render/test_triton_march.py tests/train/test_kernel_backends.py \
  tests/render/test_march.py 2>&1 | tail -3
cd bench
timeout 80 python3 launch_count.py --scene ../$S --top 20 2>&1 | grep -v "^\s*$" | tee /tmp/keep/launch_count_o.txt | sed -n 3,14p
for r in 1 2 3; do
  timeout 60 python3 train_step.py --scene ../$S 2>&1 | grep -v "^\s*$" | tee /tmp/keep/train_step_o$r.txt | sed -n 2,4p
done
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

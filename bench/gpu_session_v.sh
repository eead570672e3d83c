#!/usr/bin/env bash
# Device call V on one H200 (session 6, issue 7): GPU tests of the new one-launch kernels (training
# rays, compaction slots) and the kernel-backend training comparison, then the compacted step with
# the kernels (default) and with the PyTorch twins of the new ones, on the same host, early and
# later in training, and launches per step; then bench/leak_check.py (speckles on test views).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/data/test_triton_rays.py tests/render/test_triton_compact.py \
  tests/train/test_kernel_backends.py tests/render/test_compact.py tests/train/test_compaction.py 2>&1 | tail -2
cd bench
for warm in 500 4000; do
  for v in "" "--set training.rays_backend=torch"; do
    echo "== warmup $warm ${v:-fused kernels}"
    timeout 80 python3 train_step.py --scene ../$S --warmup $warm $v 2>&1 | grep -v "^\s*$" \
      | tee -a /tmp/keep/train_step_v.txt | sed -n 2,4p
  done
done
grep -A12 "^phases" /tmp/keep/train_step_v.txt | head -14
timeout 70 python3 launch_count.py --scene ../$S --warmup 800 --top 12 2>&1 | grep -v "^\s*$" \
  | tee /tmp/keep/launch_count_v.txt | sed -n 2,14p
echo "+$(( $(date +%s) - t0 )) s"
# quality: are the bright speckles on test views leaks through surfaces or wrong surface colours?
timeout 150 python3 leak_check.py --scene ../$S --steps 6000 --views 10 2>&1 | grep -v "^\s*$" \
  | tee /tmp/keep/leak_check_v.txt | tail -5
echo "+$(( $(date +%s) - t0 )) s"
pack

#!/usr/bin/env bash
# Device call W on one H200 (session 6, issue 7): the GPU tests of call V again after the fixes
# (IEEE division in the ray kernel; the training comparison builds rays with one code path), failures
# listed, then the step with and without the one-launch ray kernel alternated on one host.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=line tests/data/test_triton_rays.py \
  tests/render/test_triton_compact.py tests/train/test_kernel_backends.py tests/render/test_compact.py \
  tests/train/test_compaction.py 2>&1 | tail -12 | tee /tmp/keep/gpu_tests_w.txt
cd bench
for round in 1 2; do
  for v in "" "--set training.rays_backend=torch"; do
    echo "== round $round ${v:-fused kernels}"
    timeout 70 python3 train_step.py --scene ../$S --warmup 2000 --steps 500 $v 2>&1 | grep -v "^\s*$" \
      | tee -a /tmp/keep/train_step_w.txt | sed -n 4p
  done
done
echo "+$(( $(date +%s) - t0 )) s"
pack

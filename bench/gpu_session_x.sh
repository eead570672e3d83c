#!/usr/bin/env bash
# Device call X on one H200 (session 6, issue 7): the GPU tests after the fixes of call W (ray kernel
# colours within one ulp of torch's CUDA division; compaction's binary search unrolled, which Triton
# 3.6's interpreter needs), then 180 s of training with the one-launch kernels as in call U.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=line tests/data/test_triton_rays.py \
  tests/render/test_triton_compact.py tests/train/test_kernel_backends.py tests/render/test_compact.py \
  tests/train/test_compaction.py 2>&1 | tail -6 | cut -c1-600 | tee /tmp/keep/gpu_tests_x.txt
bash bench/gpu_time_to_psnr.sh fused_spp8 "--set optimizer.decay_start=10000 --set optimizer.decay_interval=5000 --set training.eval_spp=8" >/dev/null
tail -14 /tmp/keep/time_to_psnr_fused_spp8.txt
echo "+$(( $(date +%s) - t0 )) s"
pack

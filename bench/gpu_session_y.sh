#!/usr/bin/env bash
# Device call Y on one H200 (session 7, issue 7): the fused MLP kernels (trainer/model/triton_mlp.py)
# and the SH-degree option on CUDA, their GPU tests listed; then the step with and without the fused
# MLP, alternated on one host, and the launches per step with it.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short tests/model/test_triton_mlp.py \
  tests/encoding/test_triton_sh.py tests/model/test_field.py tests/train/test_kernel_backends.py 2>&1 \
  | tail -30 | cut -c1-400 | tee /tmp/keep/gpu_tests_y.txt
alternate_train_step y "--set training.mlp_backend=triton" ""
cd bench
timeout 90 python3 launch_count.py --scene ../$S --set training.mlp_backend=triton 2>&1 \
  | tee /tmp/keep/launch_count_y.txt | sed -n 1,16p
echo "+$(( $(date +%s) - t0 )) s"
pack

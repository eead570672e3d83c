#!/usr/bin/env bash
# One device call: correctness on the GPU, then short timings. Logs go to $OUT.
# Usage (device machine, repo root): bash bench/gpu_smoke.sh SCENE_DIR
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
scene=${1:-.scenes/lego_400}
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 -m pytest -q -x tests/encoding tests/render tests/data/test_rays.py tests/data/test_sampler.py 2>&1 | tail -5 | tee "$out/pytest_gpu.txt"
python3 bench/encoding.py 2>&1 | tee "$out/encoding.txt" | tail -30
python3 bench/rays.py --scene .scenes/fox --device cuda 2>&1 | tee "$out/rays.txt" | tail -12
for backend in torch triton; do
  python3 bench/train_step.py --scene "$scene" --warmup 300 --steps 200 --set encoding.backend=$backend 2>&1 | tee "$out/train_step_$backend.txt" | tail -20
done

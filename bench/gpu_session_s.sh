#!/usr/bin/env bash
# Device call S on one H200 (next session, issue 7): the compacted step after the padding fix
# (steps/s, phases), then on one host compaction on vs off over 180 s with L2 and a decay from step
# 10000, final scored with instant-ngp's 8 renders per view; training PSNR comes back in metrics.
# Two calls (each under the 10-minute limit): `bash bench/gpu_session_s.sh` (checks, steps/s,
# compacted run), then `bash bench/gpu_session_s.sh no_compact` (the uncompacted run).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
decay="--set optimizer.decay_start=10000 --set optimizer.decay_interval=5000 --set training.eval_spp=8"
if [ "${1:-}" = no_compact ]; then
  exec bash bench/gpu_time_to_psnr.sh no_compact "$decay --set training.compact_samples=false"
fi
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/render/test_compact.py tests/train/test_compaction.py \
  tests/render/test_triton_volrend.py 2>&1 | tail -2
( cd bench
  for v in "" "--set training.compact_samples=false"; do
    timeout 70 python3 train_step.py --scene ../$S $v 2>&1 | grep -v "^\s*$" | tee -a /tmp/keep/train_step_s.txt | sed -n 1,18p
  done )
bash bench/gpu_time_to_psnr.sh compact "$decay"

#!/usr/bin/env bash
# Device call F on 2×H200 (session 3): host syncs per step (1 and 2 ranks), instrumentation
# overhead in alternating blocks on one GPU, one data-parallel weak-scaling round.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
cd bench
CUDA_VISIBLE_DEVICES=0 timeout 80 python3 sync_check.py --scene ../$S 2>&1 | tail -12
timeout 90 python3 -m torch.distributed.run --nproc-per-node 2 sync_check.py --scene ../$S 2>&1 | grep -v "^W1\|OMP_NUM" | tail -14
echo "sync checks done at +$(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 profile_overhead.py --scene ../$S --pairs 20 2>&1 | tail -6
echo "overhead done at +$(( $(date +%s) - t0 )) s"
timeout 110 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --time-budget 20 --out /tmp/scal3 2>&1 | tail -5
for d in /tmp/scal3/*/; do mkdir -p /tmp/keep/scal3/$(basename $d); cp $d/metrics*.jsonl /tmp/keep/scal3/$(basename $d)/ 2>/dev/null; done
cd .. && pack
echo "all done at +$(( $(date +%s) - t0 )) s"

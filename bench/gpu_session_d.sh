#!/usr/bin/env bash
# Device call D on 2×H200 (session 3): the step with and without march prefetch on one GPU, then
# data-parallel weak scaling 1 → 2 GPUs.
source "$(dirname "$0")/gpu_env.sh"
for pf in true false; do
  echo "== train_step prefetch_march=$pf"
  CUDA_VISIBLE_DEVICES=0 timeout 100 python3 bench/train_step.py --scene $S --warmup 300 --steps 300 \
    --set training.prefetch_march=$pf 2>&1 | tail -6
done
echo "train_step done at +$(( $(date +%s) - t0 )) s"
(cd bench && timeout 200 python3 scaling.py --scene ../$S --gpus 1,2 --modes data --time-budget 20 --out /tmp/scal 2>&1 | tail -12)
mkdir -p /tmp/keep/scal; cp -r /tmp/scal/*/metrics*.jsonl /tmp/scal/scaling.json /tmp/keep/scal/ 2>/dev/null
for d in /tmp/scal/*/; do mkdir -p /tmp/keep/scal/$(basename $d); cp $d/metrics*.jsonl /tmp/keep/scal/$(basename $d)/ 2>/dev/null; done
pack
echo "all done at +$(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Device call P on one H200 (session 5, issue 7): GPU checks of the review fixes and of sample
# compaction; steps/s with and without compaction; PSNR at equal steps for compaction, the lazy
# hash-grid Adam and the L2 loss.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/render/test_triton_march.py tests/render/test_triton_volrend.py \
  tests/encoding/test_triton_sh.py tests/train/test_kernel_backends.py tests/render/test_compact.py \
  tests/train/test_compaction.py tests/train/test_grid_adam.py 2>&1 | tail -4
cd bench
for v in "" "--set training.compact_samples=false"; do
  timeout 70 python3 train_step.py --scene ../$S $v 2>&1 | grep -v "^\s*$" | tee -a /tmp/keep/train_step_p.txt | sed -n 1,20p
done
echo "steps/s done at +$(( $(date +%s) - t0 )) s"
timeout 480 python3 psnr_at_steps.py --scene ../$S --steps 6000 --eval-every 2000 --eval-images 20 \
  --variant base --variant no_compact:training.compact_samples=false \
  --variant lazy_adam:optimizer.lazy_grid_updates=true --variant lazy_l2:optimizer.lazy_grid_updates=true,loss.otype=L2 \
  --variant l2:loss.otype=L2 2>&1 | tee /tmp/keep/psnr_at_steps_p.txt | tail -12
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

#!/bin/bash
# One device call: the captured-step tests, then bench/train_step.py with training.cuda_graphs on / off /
# auto (the dynamic step) side by side, then bench/launch_count.py for on and auto. Logs under $OUT.
# lego_400 here has no val images: its train and test splits only
S=/tmp/lego_400; mkdir -p $S; for f in train test transforms_train.json transforms_test.json; do ln -sfn $PWD/.scenes/lego_400/$f $S/$f; done
python3 -m pytest -q -x tests/train/test_capture_cuda.py tests/train/test_fixed_step.py 2>&1 | tail -15 | tee $OUT/tests.log
for mode in on off auto; do
  python3 bench/train_step.py --scene $S --config configs/nerf_synthetic_400.json --set training.cuda_graphs=$mode \
    --warmup 500 --steps 500 2>&1 | tail -22 | tee $OUT/train_step_$mode.log
done
for mode in on auto; do
  python3 bench/launch_count.py --scene $S --config configs/nerf_synthetic_400.json --set training.cuda_graphs=$mode \
    --steps 5 --top 12 2>&1 | head -40 | tee $OUT/launch_count_$mode.log
done

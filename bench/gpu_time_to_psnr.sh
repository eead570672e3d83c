#!/usr/bin/env bash
# Time to PSNR over 180 s on the device machine for named config variants, one after another:
#   bash bench/gpu_time_to_psnr.sh NAME "OVERRIDES" [NAME "OVERRIDES" ...]
# OVERRIDES are time_to_psnr.py flags (e.g. "--set loss.otype=L2"); each run's table and JSON come
# back in keep.tgz as time_to_psnr_NAME.{txt,json}, with the run's metrics (training PSNR) as NAME_metrics*.jsonl.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
cd bench
while [ $# -ge 2 ]; do
  name=$1; flags=$2; shift 2
  # shellcheck disable=SC2086  # the overrides are words on purpose
  timeout 280 python3 time_to_psnr.py --scene ../$S --budget-s 180 --eval-every-s 20 --out /tmp/ttp_$name $flags 2>&1 \
    | grep -v "^\s*$" | tee /tmp/keep/time_to_psnr_$name.txt | tail -14
  cp /tmp/ttp_$name/time_to_psnr.json /tmp/keep/time_to_psnr_$name.json 2>/dev/null
  for m in /tmp/ttp_$name/metrics*.jsonl; do [ -f "$m" ] && cp "$m" /tmp/keep/${name}_$(basename "$m"); done
  echo "$name done at +$(( $(date +%s) - t0 )) s"
done
pack

#!/usr/bin/env bash
# Device call J on 2×H200 (session 4, issue 9): studies/comm_bound.toml (12 trials under sockets
# emulation), then profiles of lego_400 in data mode under pcie and sockets and in subgrid mode under
# sockets, each with the link's all-reduce busbw measured first (--link-busbw auto).
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
timeout 320 python3 -m ngptune sweep --study studies/comm_bound.toml --scene $S --trials 12 --timeout 290 \
  --out /tmp/sw_cb 2>&1 | grep -v "^\s*$" | tail -25
mkdir -p /tmp/keep/sw_cb; cp /tmp/sw_cb/trials.csv /tmp/sw_cb/best_config.json /tmp/sw_cb/best_env.sh /tmp/sw_cb/report.html /tmp/keep/sw_cb/ 2>/dev/null
for t in /tmp/sw_cb/trials/*/; do n=$(basename $t); mkdir -p /tmp/keep/sw_cb/trials/$n; cp $t/status.json $t/metrics*.jsonl /tmp/keep/sw_cb/trials/$n/ 2>/dev/null; done
pack; echo "study done at +$(( $(date +%s) - t0 )) s"
prof() {  # name, extra args
  local name=$1; shift
  timeout 80 python3 -m ngptune profile --scene $S --nproc-per-node 2 --steps 200 --trace-steps 150:153 --link-busbw auto \
    --out /tmp/prof_$name "$@" 2>&1 | tail -6
  mkdir -p /tmp/keep/prof_$name; cp /tmp/prof_$name/*.csv /tmp/prof_$name/report.html /tmp/keep/prof_$name/ 2>/dev/null; pack
  echo "profile $name done at +$(( $(date +%s) - t0 )) s"
}
prof data_pcie --emulate-interconnect pcie
prof data_sockets --emulate-interconnect sockets
prof subgrid_sockets --emulate-interconnect sockets --set parallel.mode=subgrid --set parallel.num_subgrids=2
echo "all done at +$(( $(date +%s) - t0 )) s"

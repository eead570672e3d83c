#!/usr/bin/env bash
# Device call A on 2×H200: bench-comm tables, the nccl study, profiles of 2-GPU lego_400 (NVLink, sockets).
# Usage (device machine, repo root, wheels in .whl, lego_400 in .scenes): bash bench/gpu_session_a.sh
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $out/gpu.txt
for ic in nvlink pcie sockets; do
  timeout 60 python3 -m ngptune bench-comm --nproc-per-node 2 --emulate-interconnect $ic --sizes 1M,16M,64M --csv $out/comm_$ic.csv 2>&1 | tail -12
done
echo "bench-comm done at +$(( $(date +%s) - t0 )) s"
timeout 330 python3 -m ngptune sweep --study studies/nccl.toml --scene $S --timeout 290 --out /tmp/nccl 2>&1 | tail -45
mkdir -p $out/nccl; cp /tmp/nccl/report.html /tmp/nccl/trials.csv /tmp/nccl/best_config.json /tmp/nccl/best_env.sh $out/nccl/ 2>/dev/null
echo "nccl sweep done at +$(( $(date +%s) - t0 )) s"
for ic in nvlink sockets; do
  timeout 100 python3 -m ngptune profile --scene $S --nproc-per-node 2 --steps 300 --trace-steps 200:203 --emulate-interconnect $ic --out /tmp/prof_$ic 2>&1 | tail -4
  mkdir -p $out/prof_$ic; cp /tmp/prof_$ic/*.csv /tmp/prof_$ic/*.json /tmp/prof_$ic/report.html $out/prof_$ic/ 2>/dev/null
done
echo "all done at +$(( $(date +%s) - t0 )) s"

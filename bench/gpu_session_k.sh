#!/usr/bin/env bash
# Device call K on one H200 (session 4, issue 7): launches per step by phase and operator, then
# candidate fast paths of the step timed side by side.
source "$(dirname "$0")/gpu_env.sh" 2>/dev/null
cd bench
timeout 150 python3 launch_count.py --scene ../$S --top 60 2>&1 | grep -v "^\s*$" | tee /tmp/keep/launch_count.txt | head -120
echo "launch count done at +$(( $(date +%s) - t0 )) s"; pack
timeout 330 python3 step_variants.py --scene ../$S 2>&1 | grep -v "^\s*$" | tee /tmp/keep/step_variants.txt | tail -30
echo "all done at +$(( $(date +%s) - t0 )) s"; pack

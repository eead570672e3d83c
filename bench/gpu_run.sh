#!/usr/bin/env bash
# Benchmarks and GPU checks on a device machine, by named recipe (docs/benchmarks.md, "Recipes").
#
# Usage, from the repository root of the device machine:
#   bash bench/gpu_run.sh RECIPE [ARG ...] [+ RECIPE [ARG ...]] ...
# e.g.
#   bash bench/gpu_run.sh tests + ab mlp "" "--set training.mlp_backend=triton" + launch-count
#
# Recipes run one after the other ("+" separates them); each prints its table and what it wrote,
# and after each one everything worth keeping is packed into $OUT/keep.tgz (a device call brings
# back only a few files). `bash bench/gpu_run.sh help` lists the recipes.
#
# Environment: SCENE (default .scenes/lego_400: ../shared/data/nerf_synthetic_lego_400 without its
# val split), OUT (default /tmp/out), TIMEOUT_S (outer limit of each command, default 560 s).
# Wheels carried in .whl/ (json5, plotly for reports), .whl-optuna/ (optuna and its needs, for sweeps)
# and .whl-viser/ (viser and its needs, for the viewer) are installed into /tmp/site first; a call
# carries only the folders its recipes need (the carry limit is 64 MiB with the scene).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
if compgen -G ".whl*/*.whl" >/dev/null; then  # each package once, its wheel for this python picked by pip
  names=$(for f in .whl*/*.whl; do basename "$f" | cut -d- -f1; done | sort -u)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    $(printf -- '--find-links %s ' .whl*/) $names || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
S=${SCENE:-.scenes/lego_400}
out=${OUT:-/tmp/out}
keep=/tmp/keep
limit=${TIMEOUT_S:-560}
mkdir -p "$out" "$keep"
t0=$(date +%s)

pack() { tar -C "$keep" -czf "$out/keep.tgz" . ; }
elapsed() { echo "$1 done at +$(( $(date +%s) - t0 )) s"; }
# run LOG CMD...: CMD under the outer limit, blank lines dropped, appended to $keep/LOG; packed after
# each command, so a call cut off by the device's limit still brings back what finished
run() { local log=$1 rc; shift; timeout "$limit" "$@" 2>&1 | grep -v "^\s*$" | tee -a "$keep/$log"; rc=${PIPESTATUS[0]}
  pack; return "$rc"; }
# copy_run SRC DST PATTERN...: the files of a run folder that are worth keeping
copy_run() { local src=$1 dst=$2 f; shift 2; mkdir -p "$keep/$dst"
  for f in "$@"; do cp "$src"/$f "$keep/$dst/" 2>/dev/null; done; }

# ----------------------------------------------------------------------------------- recipes

#: info: the GPU, its driver and clocks, torch and triton versions
recipe_info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv | tee "$keep/gpu.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" \
    | tee -a "$keep/gpu.txt"
}

#: tests [PYTEST PATHS]: the CUDA cases of the kernel tests (default: every Triton kernel, the
# kernel-backend training comparison and compaction); failures listed one per line
recipe_tests() {
  local paths=("$@")  # (pytest options such as -k may follow the paths)
  [ ${#paths[@]} -gt 0 ] || paths=(tests/trainer/*/test_triton_*.py tests/trainer/train/test_kernel_backends.py
                                   tests/trainer/render/test_compact.py tests/trainer/train/test_compaction.py)
  # a test past FAULT_S seconds dumps every thread's stack (where it waits), then goes on
  run gpu_tests.txt python3 -m pytest -q -p no:cacheprovider -rf --tb=line -o "faulthandler_timeout=${FAULT_S:-120}" \
    "${paths[@]}" | tail -40 | cut -c1-400
}

#: encoding: hash-grid forward and forward+backward throughput, torch and Triton
recipe_encoding() { run encoding.txt python3 bench/encoding.py | tail -30; }

#: rays [SCENE]: ray-batch time per placement and pixel-table load times (default scene .scenes/fox)
recipe_rays() { run rays.txt python3 bench/rays.py --scene "${1:-.scenes/fox}" --device cuda | tail -12; }

#: train-step [FLAGS]: steps/s and phases of the full step after warm-up (bench/train_step.py flags,
# e.g. --warmup 4000, --set training.compact_samples=false)
recipe_train-step() { run train_step.txt python3 bench/train_step.py --scene "$S" "$@" | sed -n 1,20p; }

#: ab TAG FLAGS_A FLAGS_B [FLAGS_C ...]: the step with each set of flags alternated on one host,
# A B A B ("" = the defaults), warm-up 2000 and 500 timed steps each
recipe_ab() {
  local tag=$1 round v; shift
  for round in 1 2; do
    for v in "$@"; do
      echo "== round $round ${v:-defaults}" | tee -a "$keep/train_step_$tag.txt"
      # shellcheck disable=SC2086  # the flags are words on purpose
      run "train_step_$tag.txt" python3 bench/train_step.py --scene "$S" --warmup 2000 --steps 500 $v | sed -n 4p
    done
  done
}

#: baseline-ab DIR [FLAGS_DIR [FLAGS_HERE]]: the training step of another checkout (DIR, e.g. `git archive
# COMMIT trainer bench configs pyproject.toml` unpacked into the ignored .baseline/, with that commit's
# defaults) and of this one, alternated on one host, A B A B (warm-up 1000, 500 timed steps each)
recipe_baseline-ab() {
  local dir=$1 flags_dir=${2:-} flags_here=${3:-} round scene
  scene=$(realpath "$S")
  for round in 1 2; do
    echo "== round $round $dir ${flags_dir:-defaults}" | tee -a "$keep/baseline_ab.txt"
    # shellcheck disable=SC2086  # the flags are words on purpose
    (cd "$dir" && PYTHONPATH=/tmp/site:$PWD run baseline_ab.txt python3 bench/train_step.py --scene "$scene" \
      --warmup 1000 --steps 500 $flags_dir | sed -n 1,4p)
    echo "== round $round this checkout ${flags_here:-defaults}" | tee -a "$keep/baseline_ab.txt"
    # shellcheck disable=SC2086
    run baseline_ab.txt python3 bench/train_step.py --scene "$S" --warmup 1000 --steps 500 $flags_here | sed -n 1,4p
  done
}

#: render-ab DIR [SECONDS]: a lego_400 model trained SECONDS (default 60) here, then the 1920x1080 orbit
# (16 frames, spp 1) rendered by another checkout (DIR, as in baseline-ab) and by this one, A B A B
recipe_render-ab() {
  local dir=$1 seconds=${2:-60} round scene orbit=(--skip-test --orbit-width 1920 --orbit-height 1080
    --orbit-frames 16 --no-video --mesh-resolutions)
  scene=$(realpath "$S")
  run render_ab.txt python3 bench/time_to_psnr.py --scene "$S" --budget-s "$seconds" --eval-every-s "$seconds" \
    --final-images 20 --out /tmp/render_ab_model --save-snapshot | tail -3
  for round in 1 2; do
    echo "== round $round $dir" | tee -a "$keep/render_ab.txt"
    (cd "$dir" && PYTHONPATH=/tmp/site:$PWD run render_ab.txt python3 bench/render.py --run /tmp/render_ab_model \
      --scene "$scene" "${orbit[@]}" | tail -2)
    echo "== round $round this checkout" | tee -a "$keep/render_ab.txt"
    run render_ab.txt python3 bench/render.py --run /tmp/render_ab_model --scene "$S" "${orbit[@]}" | tail -2
  done
}

#: launch-count [FLAGS]: kernel launches per step by phase and operator (bench/launch_count.py flags)
recipe_launch-count() { run launch_count.txt python3 bench/launch_count.py --scene "$S" "$@" | sed -n 1,30p; }

#: capture [FLAGS]: the fixed-capacity step captured (training.cuda_graphs=on), eager (off) and the
# dynamic step (auto) side by side: the CUDA tests of the capture, bench/train_step.py per mode
# (--warmup 500 --steps 500, configs/nerf_synthetic_400.json) and bench/launch_count.py for on and auto;
# FLAGS go to both scripts (e.g. --set training.capacity_headroom=2)
recipe_capture() {
  local mode cfg=(--config configs/nerf_synthetic_400.json)
  recipe_tests tests/trainer/train/test_capture_cuda.py tests/trainer/train/test_fixed_step.py
  for mode in on off auto; do
    run "capture_train_step_$mode.txt" python3 bench/train_step.py --scene "$S" "${cfg[@]}" \
      --set "training.cuda_graphs=$mode" --warmup 500 --steps 500 "$@" | sed -n 1,22p
  done
  for mode in on auto; do
    run "capture_launch_count_$mode.txt" python3 bench/launch_count.py --scene "$S" "${cfg[@]}" \
      --set "training.cuda_graphs=$mode" --steps 5 --top 12 "$@" | sed -n 1,40p
  done
}

#: step-targets: the training step's figures (about 5 minutes): the CUDA tests of the step's kernels
# and of the captured default (sync-free steady state), bench/train_step.py for the default, the
# dynamic step (tf32 and fp32) and bf16 one after the other on one host, launches and device time
# per kernel; then `quality-targets` in a second call
recipe_step-targets() {
  local v
  recipe_tests tests/trainer/model/test_triton_mlp.py tests/trainer/train/test_capture_cuda.py tests/trainer/render/test_triton_volrend.py \
    tests/trainer/train/test_kernel_backends.py -k "cuda or captured"
  for v in "" "--set training.cuda_graphs=dynamic" "--set training.cuda_graphs=dynamic --set training.precision=fp32" \
           "--set training.precision=bf16" ""; do
    echo "== ${v:-defaults}" | tee -a "$keep/step_targets.txt"
    # shellcheck disable=SC2086  # the flags are words on purpose
    run step_targets.txt python3 bench/train_step.py --scene "$S" --warmup 1000 --steps 500 $v | sed -n 4p
  done
  run launch_count_default.txt python3 bench/launch_count.py --scene "$S" --set training.log_every=100 \
    --set profile.phase_timers=false --warmup 1000 --steps 15 --top 14 | tail -22
}

#: quality-targets [FLAGS]: 180 s of time to PSNR with the defaults and FLAGS (model kept), then the
# render (1080p orbit) and mesh (512³) speed of that model (about 4 minutes)
recipe_quality-targets() {
  run time_to_psnr_default.txt python3 bench/time_to_psnr.py --scene "$S" --budget-s 180 --eval-every-s 10 \
    --out /tmp/ttp_default --save-snapshot "$@" | tail -14
  run render_default.txt python3 bench/render.py --run /tmp/ttp_default --scene "$S" --spp 1 --test-views 8 \
    --orbit-width 1920 --orbit-height 1080 --orbit-frames 16 --no-video --mesh-resolutions 512 | tail -7
}

#: march [RUN]: the march of a trained model with and without empty-space skipping (bench/march.py;
# default RUN: /tmp/ttp_default, which quality-targets leaves)
recipe_march() { run march.txt python3 bench/march.py --run "${1:-/tmp/ttp_default}" --scene "$S" | tail -8; }

#: step-variants: candidate fast paths of the step timed side by side in one process
recipe_step-variants() { run step_variants.txt python3 bench/step_variants.py --scene "$S" | tail -30; }

#: sync-check: host synchronisations per step by call site, on one GPU and on two ranks
recipe_sync-check() {
  CUDA_VISIBLE_DEVICES=0 run sync_check.txt python3 bench/sync_check.py --scene "$S" | tail -12
  run sync_check.txt python3 -m torch.distributed.run --nproc-per-node 2 bench/sync_check.py --scene "$S" \
    | grep -v "^W1\|OMP_NUM" | tail -14
}

#: time-to-psnr NAME FLAGS [NAME FLAGS ...]: 180 s of training per run, the 20-view curve every 20 s
# and all test views at the end (bench/time_to_psnr.py flags, e.g. "--set loss.otype=L2"); the run
# folder stays in /tmp/ttp_NAME for error-breakdown
recipe_time-to-psnr() {
  local name flags m
  while [ $# -ge 2 ]; do
    name=$1; flags=$2; shift 2
    # shellcheck disable=SC2086
    run "time_to_psnr_$name.txt" python3 bench/time_to_psnr.py --scene "$S" --budget-s 180 --eval-every-s 20 \
      --out "/tmp/ttp_$name" $flags | tail -14
    cp "/tmp/ttp_$name/time_to_psnr.json" "$keep/time_to_psnr_$name.json" 2>/dev/null
    for m in /tmp/ttp_"$name"/metrics*.jsonl; do [ -f "$m" ] && cp "$m" "$keep/${name}_$(basename "$m")"; done
    pack; elapsed "time-to-psnr $name"
  done
}

#: backgrounds NAME FLAGS [NAME FLAGS ...]: 180 s of time to PSNR per run (model kept, the 20-view curve
# every 60 s), then all test views rendered over black and over white (once, and with 8 renders per
# view) and scored against the ground truth composited on that colour: a model trained on one background colour that hides floaters of
# that colour loses on the other; the two views with the largest loss over white against black come
# back side by side with their ground truth, on both colours
recipe_backgrounds() {
  local name flags bg
  while [ $# -ge 2 ]; do
    name=$1; flags=$2; shift 2
    # shellcheck disable=SC2086
    run "backgrounds_$name.txt" python3 bench/time_to_psnr.py --scene "$S" --budget-s 180 --eval-every-s 60 \
      --out "/tmp/ttp_$name" --save-snapshot $flags | tail -6
    for bg in black white; do
      run "backgrounds_$name.txt" python3 -m ngptune render "/tmp/ttp_$name" --scene "$S" --cameras test \
        --background "$bg" --compare --quiet --out "/tmp/bg_${name}_$bg" | tail -3
      cp "/tmp/bg_${name}_$bg/scores.json" "$keep/scores_${name}_$bg.json" 2>/dev/null
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], 'mean_psnr_db', round(d['mean_psnr_db'], 2))" \
        "/tmp/bg_${name}_$bg/scores.json" "$name" "$bg" | tee -a "$keep/backgrounds.txt"
      # 8 renders per view (instant-ngp's scripts/run.py scores its test views so, over black)
      run "backgrounds_$name.txt" python3 -m ngptune render "/tmp/ttp_$name" --scene "$S" --cameras test \
        --background "$bg" --spp 8 --compare --quiet --out "/tmp/bg_${name}_${bg}_spp8" | tail -1
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], 'spp 8 mean_psnr_db', round(d['mean_psnr_db'], 2))" \
        "/tmp/bg_${name}_${bg}_spp8/scores.json" "$name" "$bg" | tee -a "$keep/backgrounds.txt"
    done
    # the two views that lose most over white against black, side by side with the ground truth
    for file in $(python3 -c "import json,sys; b,w=(json.load(open(f'/tmp/bg_{sys.argv[1]}_{c}/scores.json'))['images'] for c in ('black','white')); gap=sorted(((x['psnr_db']-y['psnr_db'],x['file']) for x,y in zip(b,w)), reverse=True); print(' '.join(f for _,f in gap[:2]))" "$name"); do
      for bg in black white; do cp "/tmp/bg_${name}_$bg/${file%.png}_compare.png" "$keep/${name}_${bg}_${file%.png}_compare.png" 2>/dev/null; done
    done
    pack; elapsed "backgrounds $name"
  done
}

#: error-breakdown NAME: where the test error of time-to-psnr run NAME lies (background, silhouette,
# interior pixels); four of its renders come back
recipe_error-breakdown() {
  local i
  run "error_breakdown_$1.txt" python3 bench/error_breakdown.py --scene "$S" --renders "/tmp/ttp_$1/renders"
  for i in 000 050 100 150; do cp "/tmp/ttp_$1/renders/test_$i.png" "$keep/" 2>/dev/null; done
}

#: psnr-at-steps ARGS: test (and training-view) PSNR of config variants at equal steps
# (bench/psnr_at_steps.py flags: --steps, --eval-every, --eval-spp, --eval-train, --variant NAME:K=V,...)
recipe_psnr-at-steps() { run psnr_at_steps.txt python3 bench/psnr_at_steps.py --scene "$S" "$@" | tail -20; }

#: leak-check ARGS: are the test-view speckles light leaking through surfaces or wrong surface colours
recipe_leak-check() { run leak_check.txt python3 bench/leak_check.py --scene "$S" "$@" | tail -5; }

#: overhead ARGS: cost of the phase timers and the NVML sampler on one GPU (default: 20 alternating pairs)
recipe_overhead() {
  [ $# -gt 0 ] || set -- --pairs 20
  CUDA_VISIBLE_DEVICES=0 run overhead.txt python3 bench/profile_overhead.py --scene "$S" "$@" | grep -v "NVML sampler" | tail -8
}

#: scaling NAME ARGS: weak/strong scaling and PSNR at equal wall time (bench/scaling.py flags,
# e.g. --gpus 1,2 --modes data --time-budget 20); scaling.json and every run's metrics come back
recipe_scaling() {
  local name=$1 d; shift
  run "scaling_$name.txt" python3 bench/scaling.py --scene "$S" --out "/tmp/$name" "$@" | tail -12
  copy_run "/tmp/$name" "$name" scaling.json
  for d in /tmp/"$name"/*/; do copy_run "$d" "$name/$(basename "$d")" "metrics*.jsonl" eval.json; done
}

#: dp-probe: 20 s runs on one GPU and on two ranks (overlap on, bf16 compression, overlap off), with
# the mean of every phase per run
recipe_dp-probe() {
  local name
  probe() { name=$1; shift
    timeout "$limit" python3 -m ngptune train --scene "$S" --n-steps 100000 --time-budget 20 --no-eval --quiet \
      --out "/tmp/probe/$name" "$@" > "/tmp/probe_$name.log" 2>&1 || tail -5 "/tmp/probe_$name.log"
    copy_run "/tmp/probe/$name" "probe/$name" "metrics*.jsonl"; }
  probe one
  probe dp --nproc-per-node 2 --set parallel.overlap_comm=true
  probe dp_bf16 --nproc-per-node 2 --set parallel.overlap_comm=true --set 'parallel.compression="bf16"'
  probe dp_nooverlap --nproc-per-node 2 --set parallel.overlap_comm=false
  python3 - "$keep/probe" <<'PY' | tee "$keep/dp_probe.txt"
import json, sys
from pathlib import Path
keys = ["step_time_ms", "data_ms", "march_ms", "field_forward_ms", "render_ms", "backward_ms", "comm_ms",
        "optimizer_ms", "occupancy_update_ms", "balance_ms", "other_ms"]
for path in sorted(Path(sys.argv[1]).glob("*/metrics*.jsonl")):
    rows = [json.loads(line) for line in path.read_text().splitlines()][2:]  # the first two: start-up
    if rows:
        means = " ".join(f"{k[:-3]}={sum(r.get(k) or 0 for r in rows) / len(rows):.2f}" for k in keys)
        samples = sum(r["throughput_samples_per_s"] for r in rows) / len(rows)
        print(f"{path.parent.name}/{path.name} samples/s={samples / 1e6:.2f}M {means}")
PY
}

#: bench-comm [INTERCONNECT ...]: all-reduce and all-gather busbw of two ranks per (emulated) link
# (default nvlink pcie sockets)
recipe_bench-comm() {
  local ic
  [ $# -gt 0 ] || set -- nvlink pcie sockets
  for ic in "$@"; do
    run "bench_comm_$ic.txt" python3 -m ngptune bench-comm --nproc-per-node 2 --emulate-interconnect "$ic" \
      --sizes 1M,16M,64M --csv "$keep/comm_$ic.csv" | tail -12
  done
}

#: profile NAME ARGS: `ngptune profile` of two ranks, 300 steps, traced steps 200-203 (more
# `ngptune profile` flags, e.g. --emulate-interconnect sockets, --set parallel.mode=subgrid)
recipe_profile() {
  local name=$1; shift
  run "profile_$name.txt" python3 -m ngptune profile --scene "$S" --nproc-per-node 2 --steps 300 \
    --trace-steps 200:203 --out "/tmp/prof_$name" "$@" | tail -12
  copy_run "/tmp/prof_$name" "prof_$name" "*.csv" "*.json" report.html
}

#: profile-one [ARGS]: `ngptune profile` of one GPU as a user runs it (5000 steps by default; the
# trace window and the NVML average come from the steady state); the summary and the report come back
recipe_profile-one() {
  run profile_one.txt python3 -m ngptune profile --scene "$S" --steps 5000 --out /tmp/prof_one "$@" | tail -16
  copy_run /tmp/prof_one prof_one "*.csv" "*.json" report.html
}

#: sweep STUDY ARGS: `ngptune sweep --study studies/STUDY.toml` with its own timeout 60 s inside the
# outer limit; report, trials and best settings come back
recipe_sweep() {
  local study=$1; shift
  run "sweep_$study.txt" python3 -m ngptune sweep --study "studies/$study.toml" --scene "$S" \
    --timeout $(( limit - 60 )) --out "/tmp/sweep_$study" "$@" | tail -30
  copy_run "/tmp/sweep_$study" "sweep_$study" report.html trials.csv best_config.json best_env.sh
}

#: mesh-support [SECONDS [FLAGS]]: train SECONDS (default 60) with FLAGS (default the 400-pixel config),
# then meshes (256³) and point clouds with --min-views 0, 1, 3, 5: kept, left out, bounding box
recipe_mesh-support() {
  local seconds=${1:-60}; shift || true
  local flags=("$@")
  [ ${#flags[@]} -gt 0 ] || flags=(--config configs/nerf_synthetic_400.json)
  run mesh_support.txt python3 -m trainer --scene "$S" "${flags[@]}" --time-budget "$seconds" --no-eval \
    --out /tmp/mesh_support_run --quiet | tail -3
  run mesh_support.txt python3 bench/mesh_support.py --run /tmp/mesh_support_run | tail -14
}

#: appearance [SCENE [SECONDS]]: training.appearance off and affine, SECONDS (default 60) each on SCENE
# (default .scenes/fox, every 8th view held out): held-out PSNR, affine-fitted PSNR, SSIM, steps
recipe_appearance() {
  local scene=${1:-.scenes/fox} seconds=${2:-60} mode
  for mode in off affine; do
    run appearance.txt python3 -m trainer --scene "$scene" --time-budget "$seconds" --quiet \
      --set training.appearance=$mode --out "/tmp/appearance_$mode" | tail -2
    python3 - "$mode" <<'PY' | tee -a "$keep/appearance.txt"
import json, sys
e = json.load(open(f"/tmp/appearance_{sys.argv[1]}/eval.json"))
print(f"appearance {sys.argv[1]}: step {e['step']}, held-out PSNR {e['mean_psnr_db']:.2f} dB, "
      f"affine-fitted {e['mean_psnr_affine_db']:.2f} dB, SSIM {e['mean_ssim']:.3f} ({len(e['images'])} views)")
PY
  done
}

#: sweep-packing [K ...]: trials per hour on one GPU with K trials packed on it (default 1 2 4),
# studies/psnr_steps.toml without its pruner, 150 s of starting trials per K (bench/sweep_fidelity.py)
recipe_sweep-packing() {
  local ks=("$@"); [ ${#ks[@]} -gt 0 ] || ks=(1 2 4)
  run sweep_packing.txt python3 bench/sweep_fidelity.py packing --study studies/psnr_steps.toml --scene "$S" \
    --k "${ks[@]}" --wall-s "${WALL_S:-150}" --out /tmp/sweep_fidelity | tail -8
  cp /tmp/sweep_fidelity/packing_*.json "$keep/" 2>/dev/null
}

#: sweep-pruning [pruned|unpruned ...]: studies/psnr_budget.toml with its Hyperband pruner against none
# at equal wall time (WALL_S, default 240 s of starting trials), then 3 confirmation re-runs each
recipe_sweep-pruning() {
  local arms=("$@"); [ ${#arms[@]} -gt 0 ] || arms=(pruned unpruned)
  run sweep_pruning.txt python3 bench/sweep_fidelity.py pruning --study studies/psnr_budget.toml --scene "$S" \
    --arms "${arms[@]}" --wall-s "${WALL_S:-240}" --confirm-runs "${CONFIRM_RUNS:-3}" --out /tmp/sweep_fidelity | tail -8
  cp /tmp/sweep_fidelity/pruning_*.json "$keep/" 2>/dev/null
}

#: study FILE DIR [SWEEP FLAGS]: `ngptune sweep --study FILE --out DIR` run (or resumed) and stopped by SIGINT
# after STUDY_S seconds (default 500; a stopped sweep resumes where it was), then DIR without models and
# images packed into $OUT/study.tgz: carry DIR in the next call to go on (needs .whl-optuna)
recipe_study() {
  local file=$1 dir=$2; shift 2
  run study.txt timeout -s INT -k 30 "${STUDY_S:-500}" python3 -m ngptune sweep --study "$file" --out "$dir" "$@" | tail -40
  tar -C "$(dirname "$dir")" -czf "$out/study.tgz" --exclude='*.pt' --exclude='*.png' --exclude='*.jpg' \
    --exclude='*.mp4' "$(basename "$dir")"
  cp "$dir"/trials.csv "$dir"/best_config*.json "$keep/" 2>/dev/null
}

#: viewer [RUN]: the web viewer's frames/s at rest (spp 1) at 1280x720 and 1920x1080 of a lego_400 model
# (RUN, default: 3000 steps trained here into /tmp/viewer_lego), and training steps/s with and without
# --view (idle; and one headless Chromium page at rest when chromium is on PATH), 2 alternating rounds.
# Needs viser (with its dependencies): carry .whl-viser/.
recipe_viewer() {
  local run=${1:-/tmp/viewer_lego} browser=()
  command -v chromium >/dev/null 2>&1 && browser=(--browser)
  [ -d "$run/snapshots" ] || run viewer.txt python3 -m trainer --scene "$S" --config configs/nerf_synthetic_400.json \
    --n-steps 3000 --no-eval --quiet --out "$run" | tail -1 | cut -c1-300
  run viewer.txt python3 bench/viewer.py frames --run "$run" | tail -5
  run viewer.txt python3 bench/viewer.py training --scene "$S" --config configs/nerf_synthetic_400.json \
    --n-steps 3000 --rounds 2 ${browser[@]+"${browser[@]}"} | tail -6
  pack; elapsed viewer
}

#: background [SECONDS]: scenes with backgrounds: fox with the box scene model (training.scene_model=box, what
# fox trained with before the unbounded model) and with the defaults (auto: unbounded for fox), then lego_400
# with the defaults (auto: box, as before), SECONDS (default 60) of training each: held-out PSNR (fox: its 7
# held-out views; lego: 20), rays per step, samples per ray, step ms, where the samples fall (bench/samples_per_ray.py)
recipe_background() {
  local seconds=${1:-60}
  run background.txt python3 bench/samples_per_ray.py --scene .scenes/fox --time-budget "$seconds" --eval-images 7 \
    --variant box:training.scene_model=box --variant defaults | tail -6
  run background.txt python3 bench/samples_per_ray.py --scene "$S" --time-budget "$seconds" --eval-images 20 \
    --variant defaults | tail -5
}

#: eval-estimate [SECONDS]: `ngptune train` as a user runs it, SECONDS (default 30) of training on
# .scenes/fox and on $SCENE: the evaluation's estimate against the seconds it took (status.json)
recipe_eval-estimate() {
  local seconds=${1:-30} scene name
  for scene in .scenes/fox "$S"; do
    name=$(basename "$scene")
    run eval_estimate.txt python3 -m ngptune train --scene "$scene" --time-budget "$seconds" \
      --out "/tmp/eval_estimate_$name" | tail -4
    python3 - "/tmp/eval_estimate_$name/status.json" "$name" <<'PY' | tee -a "$keep/eval_estimate.txt"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: step {s.get('step')}, evaluation estimated {s.get('eval_estimate_s')} s, "
      f"took {s.get('eval_time_s')} s, PSNR {s.get('eval_psnr_db')} dB")
PY
  done
}

#: fog SECONDS WEIGHT [WEIGHT ...]: the distortion regulariser on captures with background: fox with the
# defaults and with loss.distortion_weight=WEIGHT for each WEIGHT, SECONDS of training each (samples per ray,
# rays per step, held-out PSNR on its 7 held-out views: bench/samples_per_ray.py), then lego_400 the same way
# (20 views), so that the synthetic scene shows any harm
recipe_fog() {
  local seconds=$1 w variants=(--variant defaults); shift
  for w in "$@"; do variants+=(--variant "dist$w:loss.distortion_weight=$w"); done
  run fog.txt python3 bench/samples_per_ray.py --scene .scenes/fox --time-budget "$seconds" --eval-images 7 \
    "${variants[@]}" | tail -8
  run fog.txt python3 bench/samples_per_ray.py --scene "$S" --time-budget "$seconds" --eval-images 20 \
    "${variants[@]}" | tail -8
}

#: help: this list
recipe_help() { awk '/^#: /{on=1; sub(/^#: /, "  "); print; next} on && /^# /{sub(/^# /, "      "); print; next} {on=0}' "$0"; }

# ------------------------------------------------------------------------------------ driver

[ $# -gt 0 ] || { recipe_help; exit 2; }
for word in "$1" $(printf '%s\n' "$@" | grep -A1 -x "+" | grep -vx -- "+\|--"); do  # every recipe name first
  if ! declare -F "recipe_$word" >/dev/null; then
    echo "error: bench/gpu_run.sh: unknown recipe '$word' (bash bench/gpu_run.sh help lists them)" >&2
    exit 2
  fi
done
status=0
while [ $# -gt 0 ]; do
  args=()
  name=$1; shift
  while [ $# -gt 0 ] && [ "$1" != "+" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift  # the "+"
  echo "== $name ${args[*]:-}"
  "recipe_$name" ${args[@]+"${args[@]}"} || status=1
  pack; elapsed "$name"
done
exit $status

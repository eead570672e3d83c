"""Study files: the shipped studies load; every error names the file and the dotted key; the
NCCL allow-list is enforced at load, before any launch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ngptune.tuning.study import BUDGET_STEPS_CAP, load_study
from tests.support.paths import REPO
from tests.support.studies import THROUGHPUT, study_text, write_study
from trainer.contract.errors import ConfigError

STUDIES = REPO / "studies"


@pytest.mark.parametrize("name", ["demo", "nccl", "parallel", "quality_time", "psnr_budget", "comm_bound", "psnr_steps", "capture"])
def test_shipped_studies_load(name):
    spec = load_study(STUDIES / f"{name}.toml")
    assert spec.name == name
    assert spec.params, "a shipped study searches something"
    spec.base_config()  # the base config with the fixed settings and the budget is valid


def test_demo_study_is_cpu_sized_with_a_step_budget():
    spec = load_study(STUDIES / "demo.toml")
    assert spec.scene == "demo"
    assert spec.budget.seconds is None and spec.budget.steps is not None and spec.budget.steps * spec.trials <= 600
    assert spec.objective_names == ["psnr_at_budget_db"] and spec.pruner.type == "none"
    cfg = spec.base_config()
    assert cfg.training.time_budget_s is None and cfg.training.n_steps == spec.budget.steps
    assert BUDGET_STEPS_CAP > spec.budget.steps


def test_studies_that_share_a_gpu_or_run_on_a_cpu_use_step_budgets_and_gpu_studies_prune():
    from ngptune.tuning.concurrency import default_trials_per_gpu

    for name in ("demo", "psnr_steps"):  # the CPU demo and the study that packs trials on a GPU
        spec = load_study(STUDIES / f"{name}.toml")
        assert spec.budget.steps is not None and default_trials_per_gpu(spec, 0) == 1
    for name in ("psnr_budget", "psnr_steps", "capture"):
        spec = load_study(STUDIES / f"{name}.toml")
        assert spec.pruner.type in ("hyperband", "successive_halving") and spec.pruner.has_marks
        overrides = spec.fixed_overrides()
        if name in ("psnr_budget", "capture"):  # a seconds budget: marks at the rungs only
            rungs = {"psnr_budget": [3, 9, 27], "capture": [4, 12, 36]}[name]
            assert overrides["training.eval_at_s"] == list(spec.pruner.eval_at_s) == rungs
        else:
            assert overrides["training.eval_every"] == spec.pruner.eval_every_steps
        assert overrides["training.eval_every_max_images"] == spec.pruner.eval_images == 2
        unit = spec.budget.steps if spec.budget.steps is not None else int(spec.budget.seconds)
        assert spec.pruner.max_resource == unit and spec.pruner.min_resource < unit
        # nothing prunes a confirmation re-run: it trains without the marks
        assert spec.rerun_overrides(2338) == {"training.seed": 2338, "training.eval_every": 0, "training.eval_at_s": []}
    capture = load_study(STUDIES / "capture.toml")
    assert capture.budget.seconds == 60 and capture.trials >= 24
    assert {"data.aabb_scale", "encoding.max_resolution_factor", "training.cone_angle", "training.occupancy_threshold",
            "training.occupancy_decay", "training.near_distance", "training.target_samples_per_step",
            "optimizer.learning_rate", "training.scene_model", "training.background_steps",
            "loss.distortion_weight"} == {p.name for p in capture.params}
    from ngptune.tuning.space import default_params

    derived = default_params(capture, capture.base_config())  # the trainer derives box and cone angle
    assert "data.aabb_scale" not in derived and "training.cone_angle" not in derived
    assert derived["encoding.max_resolution_factor"] == 1.0 and derived["training.near_distance"] == 0.0
    assert derived["training.scene_model"] == "auto" and derived["training.background_steps"] == 64
    assert "loss.distortion_weight" not in derived  # null: the trainer takes 0.05 for fox's unbounded model
    # the default trial is `ngptune train`'s defaults, not instant-ngp's base.json (Huber, weight average)
    from trainer.contract.config import TrainConfig

    base = capture.base_config()
    assert (base.loss, base.optimizer) == (TrainConfig().loss, TrainConfig().optimizer)


@pytest.mark.parametrize("pruner, rungs", [
    ('type = "hyperband"\nmin_resource = 4\nreduction_factor = 3', (4, 12, 36)),
    # max_resource sets the brackets; each bracket still compares at every rung below the budget
    ('type = "hyperband"\nmin_resource = 4\nreduction_factor = 3\nmax_resource = 12', (4, 12, 36)),
    ('type = "successive_halving"\nmin_resource = 2\nreduction_factor = 2\nmin_early_stopping_rate = 1', (4, 8, 16, 32)),
])
def test_marks_at_the_rungs_evaluate_at_the_seconds_the_pruner_compares_trials_at(tmp_path, demo_scene, pruner, rungs):
    path = write_study(tmp_path / "s.toml", scene=demo_scene, budget="seconds = 60\ntrial_timeout_s = 300",
                       objectives='[[objectives]]\nname = "psnr_at_budget_db"\n',
                       pruner=pruner + '\neval_at = "rungs"\neval_images = 2')
    spec = load_study(path)
    assert spec.pruner.eval_at_s == rungs and spec.pruner.has_marks and spec.pruner.eval_every_steps is None
    overrides = spec.fixed_overrides()
    assert overrides["training.eval_at_s"] == list(rungs) and overrides["training.eval_every_max_images"] == 2
    assert "training.eval_every" not in overrides
    assert spec.base_config().training.eval_at_s == rungs
    assert spec.rerun_overrides(1)["training.eval_at_s"] == []  # a re-run is not pruned: no marks


def test_rungs_below_a_fractional_seconds_budget_are_marked(tmp_path, demo_scene):
    def study(pruner: str):
        return load_study(write_study(tmp_path / "s.toml", scene=demo_scene, budget="seconds = 4.9\ntrial_timeout_s = 300",
                                      objectives='[[objectives]]\nname = "psnr_at_budget_db"\n',
                                      pruner=pruner + '\neval_at = "rungs"'))

    assert study('type = "successive_halving"\nmin_resource = 1\nreduction_factor = 2').pruner.eval_at_s == (1, 2, 4)
    assert study('type = "successive_halving"\nmin_resource = 4\nreduction_factor = 2').pruner.eval_at_s == (4,)
    with pytest.raises(ConfigError, match=r"the first rung, pruner.min_resource = 5 s, is not inside budget.seconds "
                                         r"\(4.9 s\)"):
        study('type = "successive_halving"\nmin_resource = 5\nreduction_factor = 2')


def test_quality_time_has_two_objectives_and_no_pruner():
    spec = load_study(STUDIES / "quality_time.toml")
    assert spec.objective_names == ["psnr_at_budget_db", "time_to_psnr_s"]
    assert spec.directions == ["maximize", "minimize"] and spec.objectives[1].target_db == 33.0
    assert spec.pruner.type == "none" and spec.needs_eval
    # a re-run keeps the marks time_to_psnr_s is read from
    marks = spec.objectives[1].eval_every_steps
    assert marks and spec.rerun_overrides(5)["training.eval_every"] == marks == spec.fixed_overrides()["training.eval_every"]


def test_psnr_budget_is_one_quality_objective_scored_on_every_trial():
    spec = load_study(STUDIES / "psnr_budget.toml")
    assert spec.objective_names == ["psnr_at_budget_db"] and spec.directions == ["maximize"]
    assert spec.budget.seconds == 30 and spec.trials >= 16
    assert spec.pruner.type == "hyperband" and spec.needs_eval


def test_nccl_study_sweeps_the_allow_list():
    spec = load_study(STUDIES / "nccl.toml")
    names = {p.name for p in spec.params}
    assert {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS"} <= names
    proto = next(p for p in spec.params if p.name == "NCCL_PROTO")
    assert "LL128" not in proto.choices


def test_settings_tables_and_conditions(tmp_path, demo_scene):
    text = study_text(scene=demo_scene, params=(
        '[params."parallel.mode"]\ntype = "categorical"\nchoices = ["data", "subgrid"]\n'
        '[params.parallel.num_subgrids]\ntype = "int"\nlow = 2\nhigh = 4\nwhen = { "parallel.mode" = ["subgrid"] }\n'
        '[params."parallel.bucket_mib"]\ntype = "float"\nlow = 1\nhigh = 64\nlog = true\n'
    ))
    text = text.replace("[settings]\n", "[settings]\nparallel.compression = \"bf16\"\n")
    path = tmp_path / "s.toml"
    path.write_text(text)
    spec = load_study(path)
    assert spec.settings["parallel.compression"] == "bf16"  # a dotted key written as nested tables
    subgrids = next(p for p in spec.params if p.name == "parallel.num_subgrids")
    assert subgrids.when == (("parallel.mode", ("subgrid",)),)
    assert subgrids.values() == [2, 3, 4]
    bucket = next(p for p in spec.params if p.name == "parallel.bucket_mib")
    assert bucket.log and (bucket.low, bucket.high) == (1, 64)


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message  # every error names the study file
    assert "\n" not in message
    return message.removeprefix(f"{path}: ")


def _param(name: str, body: str) -> str:
    return f'[params."{name}"]\n{body}\n'


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"settings": {"training.precision": "fp8"}}, r"^settings\.training\.precision: expected one of fp32, tf32, bf16, fp16, got 'fp8'"),
        ({"settings": {"training.n_step": 5}}, r"^settings: unknown key 'training\.n_step' \(did you mean 'training\.n_steps'\?\)"),
        ({"settings": {"LD_PRELOAD": "/tmp/x.so"}},  # at most the 3 closest keys, not all of them
         r"^settings: unknown key 'LD_PRELOAD' \((closest: [a-z_]+\.[a-z0-9_]+(, [a-z_]+\.[a-z0-9_]+){0,2}; )?"
         r"one of \d+ keys, listed in trainer/contract/config/blocks\.py\)$"),
        ({"settings": {"foo.bar": 1}},  # nothing like it: no suggestion
         r"^settings: unknown key 'foo\.bar' \(one of \d+ keys, listed in trainer/contract/config/blocks\.py\)$"),
        ({"settings": {"training.max_rays_per_step": 16}}, r"^settings\.training\.max_rays_per_step: expected an integer >= training\.initial_rays_per_step"),
        ({"settings": {"training.time_budget_s": 5}}, r"^settings\.training\.time_budget_s: training\.time_budget_s cannot be set in a study: set by the budget"),
        ({"settings": {"distributed.master_port": 29500}}, r"^settings\.distributed\.master_port: .*free rendezvous port"),
        ({"params": _param("training.precision", 'type = "categorical"\nchoices = ["fp32", "fp64"]')},
         r"^params\.training\.precision\.choices\[1\]: expected one of fp32, tf32, bf16, fp16, got 'fp64'"),
        ({"params": _param("network.n_neurons", 'type = "int"\nlow = 16\nhigh = 48'), "settings": {"network.n_neurons": None}},
         r"^params\.network\.n_neurons: expected a multiple of 16 in \[16, 256\], got 17"),
        ({"params": _param("training.n_stepz", 'type = "int"\nlow = 1\nhigh = 2')},
         r"^params\.training\.n_stepz: unknown key 'training\.n_stepz' \(did you mean 'training\.n_steps'\?\)"),
        ({"params": _param("parallel.overlap", 'type = "float"\nlow = 0.3\nhigh = 0.1')},
         r"^params\.parallel\.overlap\.high: expected a number >= low \(0\.3\), got 0\.1"),
        ({"params": _param("parallel.overlap", 'type = "float"\nlow = 0.0\nhigh = 0.9')},
         r"^params\.parallel\.overlap\.high: expected a number in \[0, 0\.5\], got 0\.9"),
        ({"params": _param("parallel.bucket_mib", 'type = "float"\nlow = 0\nhigh = 8\nlog = true')},
         r"^params\.parallel\.bucket_mib\.low: expected a value > 0 on a log scale"),
        ({"params": _param("parallel.mode", 'type = "choice"\nchoices = ["data"]')},
         r"^params\.parallel\.mode\.type: expected one of categorical, int, float, got 'choice'"),
        ({"params": _param("parallel.mode", 'type = "categorical"\nchoices = ["data"]\nlow = 1')},
         r"^unknown key 'params\.parallel\.mode\.low' \(did you mean 'when'\?|^unknown key 'params\.parallel\.mode\.low'"),
        ({"params": _param("parallel.num_subgrids", 'type = "int"\nlow = 2\nhigh = 4\nwhen = { "parallel.mode" = "subgrid" }')},
         r"^params\.parallel\.num_subgrids\.when\.parallel\.mode: expected a parameter defined above this one"),
        ({"params": _param("parallel.mode", 'type = "categorical"\nchoices = ["data"]')
          + _param("parallel.num_subgrids", 'type = "int"\nlow = 2\nhigh = 4\nwhen = { "parallel.mode" = "subgrid" }')},
         r"^params\.parallel\.num_subgrids\.when\.parallel\.mode: 'subgrid' is not a value params\.parallel\.mode can take"),
        ({"params": _param("training.initial_rays_per_step", 'type = "int"\nlow = 64\nhigh = 128')},
         r"^params\.training\.initial_rays_per_step: also fixed in settings\.training\.initial_rays_per_step"),
        ({"budget": "steps = 10\nseconds = 5"}, r"^budget: expected exactly one of steps, seconds"),
        ({"budget": "minutes = 3"}, r"^unknown key 'budget\.minutes'"),
        ({"budget": "seconds = 30\ntrial_timeout_s = 20"}, r"^budget\.trial_timeout_s: expected more than budget\.seconds \(30\), got 20"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "pruner": 'type = "hyperband"\neval_every_steps = 20'},
         r"^pruner\.eval_every_steps: expected fewer than budget\.steps \(20\) so a mark falls inside the budget, got 20"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "pruner": 'type = "hyperband"\neval_images = 2'},
         r"^pruner\.eval_images: needs pruner\.eval_every_steps"),
        ({"pruner": 'type = "successive_halving"\neval_every_steps = 5'},
         r"^pruner\.eval_every_steps: evaluation marks report the PSNR of psnr_at_budget_db"),
        ({"pruner": 'type = "none"\neval_every_steps = 5'}, r"^unknown key 'pruner\.eval_every_steps'"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "budget": "seconds = 30",
          "settings": {"training.eval_every": 10}, "pruner": 'type = "hyperband"\neval_at = "rungs"'},
         r"^settings\.training\.eval_every: set by the pruner's evaluation marks \(pruner\.eval_every_steps or "
         r"pruner\.eval_at, pruner\.eval_images\); leave it out of \[settings\]"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "settings": {"training.eval_at_s": [2, 3]},
          "pruner": 'type = "hyperband"\neval_every_steps = 5'}, r"^settings\.training\.eval_at_s: set by the pruner's"),
        ({"objectives": '[[objectives]]\nname = "time_to_psnr_s"\ntarget_db = 20\neval_every_steps = 5\n',
          "settings": {"training.eval_every": 10}},
         r"^settings\.training\.eval_every: set by the objective's eval_every_steps"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "pruner": 'type = "hyperband"\neval_at = "rungs"'},
         r"^pruner\.eval_at: marks at the rungs take successive_halving or hyperband with a budget\.seconds"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "budget": "seconds = 30",
          "pruner": 'type = "hyperband"\neval_at = "rungs"\neval_every_steps = 5'},
         r"^pruner\.eval_at: give pruner\.eval_at or pruner\.eval_every_steps, not both"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "budget": "seconds = 30",
          "pruner": 'type = "median"\neval_at = "rungs"'},
         r"^pruner\.eval_at: marks at the rungs take successive_halving or hyperband"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n', "budget": "seconds = 30",
          "pruner": 'type = "hyperband"\neval_at = "steps"'},
         r"^pruner\.eval_at: expected \"rungs\", got 'steps'"),
        ({"budget": "seconds = 30", "pruner": 'type = "successive_halving"\neval_at = "rungs"'},
         r"^pruner\.eval_at: evaluation marks report the PSNR of psnr_at_budget_db"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n',
          "pruner": 'type = "successive_halving"\neval_every_steps = 5\nmin_resource = 1000'},
         r"^pruner\.min_resource: the first rung, pruner\.min_resource = 1000 steps, is not inside budget\.steps \(20\): "
         r"no trial could be stopped early"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n',
          "pruner": 'type = "hyperband"\neval_every_steps = 5\nmax_resource = 100000'},
         r"^pruner\.max_resource: expected at most budget\.steps \(20\), got 100000"),
        ({"objectives": '[[objectives]]\nname = "psnr_at_budget_db"\n',
          "pruner": 'type = "hyperband"\neval_every_steps = 5\nmin_resource = 10\nmax_resource = 5'},
         r"^pruner\.min_resource: expected less than pruner\.max_resource \(5\), got 10"),
        ({"budget": "steps = 1000000000000"}, r"^budget\.steps: expected an integer in 1\.\.10,000,000"),
        ({"objectives": '[[objectives]]\nname = "time_to_psnr_s"\n'}, r"^objectives\[0\]: missing key 'target_db'"),
        ({"objectives": '[[objectives]]\nname = "samples_per_hour"\n'}, r"^objectives\[0\]\.name: expected one of throughput_samples_per_s, samples_per_s, rays_per_s, psnr_at_budget_db, time_to_psnr_s"),
        ({"objectives": THROUGHPUT + THROUGHPUT}, r"^objectives\[1\]\.name: objective throughput_samples_per_s listed twice"),
        ({"objectives": ""}, r"^objectives: expected one or more \[\[objectives\]\] tables"),
        ({"objectives": THROUGHPUT + '[[objectives]]\nname = "time_to_psnr_s"\ntarget_db = 20\n', "pruner": 'type = "median"'},
         r"^pruner\.type: median needs a single objective"),
        ({"pruner": 'type = "median"\nreduction_factor = 3'}, r"^unknown key 'pruner\.reduction_factor'"),
        ({"sampler": 'type = "cmaes"'}, r"^sampler\.type: expected one of tpe, random, nsga2, got 'cmaes'"),
        ({"sampler": 'type = "random"\nn_startup_trials = 3'}, r"^sampler\.n_startup_trials: only for sampler\.type = tpe, not random"),
    ],
)
def test_errors_name_the_dotted_key(tmp_path, demo_scene, kwargs, expected):
    assert re.search(expected, _error(tmp_path, study_text(scene=demo_scene, **kwargs)))


def test_file_level_errors(tmp_path, demo_scene):
    assert _error(tmp_path, "[study\nname = 1").startswith("invalid TOML:")
    assert re.match(r"unknown key 'sweep' \(did you mean 'settings'\?\)|unknown key 'sweep'",
                    _error(tmp_path, study_text(scene=demo_scene) + "[sweep]\nx = 1\n"))
    text = study_text(scene=demo_scene).replace('[study]\n', '[study]\nconfig = "configs/nope.json"\n')
    assert re.match(r"study\.config: 'configs/nope\.json' not found \(looked for .*bad\.toml|study\.config: 'configs/nope\.json' not found",
                    _error(tmp_path, text))
    text = study_text(scene=tmp_path / "no_scene")
    assert _error(tmp_path, text).startswith("study.scene: ")
    with pytest.raises(ConfigError, match=r"missing\.toml: study file not found"):
        load_study(tmp_path / "missing.toml")


def test_relative_paths_from_study_folder_then_repo_root(tmp_path, demo_scene):
    (tmp_path / "local.json").write_text('{"training": {"log_every": 7}}')
    text = study_text(scene=demo_scene, settings={"training.log_every": None})
    path = tmp_path / "s.toml"
    path.write_text(text.replace("[study]\n", '[study]\nconfig = "local.json"\n'))
    assert load_study(path).base_config().training.log_every == 7
    path.write_text(text.replace("[study]\n", '[study]\nconfig = "configs/small.json"\n'))
    assert load_study(path).base_config_path == REPO / "configs" / "small.json"


# ------------------------------------------------------------------------------------ NCCL allow-list


@pytest.mark.parametrize(
    "param, expected",
    [
        (_param("NCCL_PROTO", 'type = "categorical"\nchoices = ["Simple", "LL", "LL128"]'),
         r"^params\.NCCL_PROTO\.choices\[2\]: NCCL_PROTO=LL128 is never forced"),
        (_param("NCCL_ALGO", 'type = "categorical"\nchoices = ["Ring", "CollNet"]'),
         r"^params\.NCCL_ALGO\.choices\[1\]: NCCL_ALGO: expected one of Ring, Tree, got 'CollNet'"),
        (_param("NCCL_NVLS_ENABLE", 'type = "categorical"\nchoices = [0, 1]'),
         r"^params\.NCCL_NVLS_ENABLE: NCCL_NVLS_ENABLE is always 0 in a trial"),
        (_param("NCCL_SOCKET_IFNAME", 'type = "categorical"\nchoices = ["eth0", "ib0"]'),
         r"^params\.NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME is a site variable"),
        (_param("NCCL_IB_HCA", 'type = "categorical"\nchoices = ["mlx5_0"]'), r"^params\.NCCL_IB_HCA: NCCL_IB_HCA is a site variable"),
        (_param("NCCL_P2P_DISABLE", 'type = "categorical"\nchoices = [0, 1]'),
         r"^params\.NCCL_P2P_DISABLE: .*distributed\.emulate_interconnect"),
        (_param("NCCL_DEBUG", 'type = "categorical"\nchoices = ["WARN"]'), r"^params\.NCCL_DEBUG: NCCL_DEBUG is set by the sweep"),
        (_param("NCCL_FOO", 'type = "categorical"\nchoices = [1]'), r"^params\.NCCL_FOO: NCCL_FOO is not on the NCCL allow-list"),
        (_param("NCCL_BUFFSIZE", 'type = "categorical"\nchoices = [1048576, 3000000]'),
         r"^params\.NCCL_BUFFSIZE\.choices\[1\]: NCCL_BUFFSIZE: expected a power of two from 1 MiB to 16 MiB"),
        (_param("NCCL_BUFFSIZE", 'type = "categorical"\nchoices = [33554432]'), r"^params\.NCCL_BUFFSIZE\.choices\[0\]: NCCL_BUFFSIZE: expected"),
        (_param("NCCL_BUFFSIZE", 'type = "int"\nlow = 1048576\nhigh = 2097152'), r"^params\.NCCL_BUFFSIZE: NCCL_BUFFSIZE: expected .*got 1048577"),
        (_param("NCCL_MAX_NCHANNELS", 'type = "int"\nlow = 1\nhigh = 33'), r"^params\.NCCL_MAX_NCHANNELS\.high: NCCL_MAX_NCHANNELS: expected an integer in \[1, 32\], got 33"),
        (_param("NCCL_MIN_NCHANNELS", 'type = "int"\nlow = 0\nhigh = 4'), r"^params\.NCCL_MIN_NCHANNELS\.low: .*got 0"),
        (_param("NCCL_NTHREADS", 'type = "categorical"\nchoices = [128, 1024]'), r"^params\.NCCL_NTHREADS\.choices\[1\]: NCCL_NTHREADS: expected one of 64, 128, 256, 512, got 1024"),
        (_param("NCCL_NTHREADS", 'type = "categorical"\nchoices = ["128"]'), r"^params\.NCCL_NTHREADS\.choices\[0\]: .*got '128'"),
        (_param("NCCL_MAX_NCHANNELS", 'type = "float"\nlow = 1\nhigh = 4'), r"^params\.NCCL_MAX_NCHANNELS\.type: NCCL_MAX_NCHANNELS takes integers"),
    ],
)
def test_nccl_allow_list_rejections(tmp_path, demo_scene, param, expected):
    assert re.search(expected, _error(tmp_path, study_text(scene=demo_scene, params=param)))


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"NCCL_NVLS_ENABLE": 1}, r"^settings\.NCCL_NVLS_ENABLE: NCCL_NVLS_ENABLE is always 0"),
        ({"NCCL_PROTO": "LL128"}, r"^settings\.NCCL_PROTO: NCCL_PROTO=LL128 is never forced"),
        ({"NCCL_IB_HCA": "mlx5_0"}, r"^settings\.NCCL_IB_HCA: NCCL_IB_HCA is a site variable"),
    ],
)
def test_nccl_fixed_settings_rejections(tmp_path, demo_scene, settings, expected):
    assert re.search(expected, _error(tmp_path, study_text(scene=demo_scene, settings=settings)))


def test_nccl_allowed_values_load(tmp_path, demo_scene):
    params = (_param("NCCL_ALGO", 'type = "categorical"\nchoices = ["Ring", "Tree"]')
              + _param("NCCL_PROTO", 'type = "categorical"\nchoices = ["Simple", "LL"]')
              + _param("NCCL_MAX_NCHANNELS", 'type = "int"\nlow = 1\nhigh = 32')
              + _param("NCCL_BUFFSIZE", 'type = "categorical"\nchoices = [1048576, 16777216]')
              + _param("NCCL_NTHREADS", 'type = "categorical"\nchoices = [64, 128, 256, 512]'))
    path = write_study(tmp_path / "n.toml", scene=demo_scene, params=params,
                       settings={"NCCL_NVLS_ENABLE": 0, "NCCL_MIN_NCHANNELS": 2})
    spec = load_study(path)
    assert [p.name for p in spec.params] == ["NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS"]
    assert all(p.is_nccl for p in spec.params)
    assert spec.nccl_settings == {"NCCL_MIN_NCHANNELS": 2}  # NCCL_NVLS_ENABLE=0 is the trial's own


def test_a_parameter_value_no_trial_could_run_is_refused_at_load(tmp_path, demo_scene):
    # the tiny settings fix encoding.per_level_scale, so every max_resolution conflicts with it
    params = _param("encoding.max_resolution", 'type = "categorical"\nchoices = [512, 1024]')
    path = write_study(tmp_path / "a.toml", scene=demo_scene, params=params)
    with pytest.raises(ConfigError, match=r"a\.toml: params\.encoding\.max_resolution\.choices\[0\]: 512 fails in every "
                                          r"trial with this study's settings: encoding.max_resolution: set either it "
                                          r"or encoding.per_level_scale"):
        load_study(path)
    # below the fixed base_resolution (8 in the tiny settings): refused, naming the value
    unset = {"encoding.per_level_scale": None}
    params = _param("encoding.max_resolution", 'type = "categorical"\nchoices = [512, 4]')
    path = write_study(tmp_path / "b.toml", scene=demo_scene, params=params, settings=unset)
    with pytest.raises(ConfigError, match=r"params\.encoding\.max_resolution\.choices\[1\]: 4 fails in every trial"):
        load_study(path)
    # valid with some value of another parameter: accepted (the trial's own check decides)
    params += _param("encoding.base_resolution", 'type = "categorical"\nchoices = [2, 256]')
    unset["encoding.base_resolution"] = None
    path = write_study(tmp_path / "c.toml", scene=demo_scene, params=params, settings=unset)
    assert [p.name for p in load_study(path).params] == ["encoding.max_resolution", "encoding.base_resolution"]


def test_definition_differences_name_the_changed_keys():
    from ngptune.tuning.storage import definition_differences

    old = {"config": {"training": {"time_budget_s": 2.0, "log_every": 5}}, "scene": "a"}
    new = {"config": {"training": {"time_budget_s": 3.0, "log_every": 5}}, "scene": "a", "x": 1}
    assert definition_differences(old, new) == [  # a [budget] key is named as the study file spells it
        "budget.seconds (config.training.time_budget_s): 2.0 → 3.0", "x: null → 1"]
    assert definition_differences(old, old) == []
    rungs = [{"config": {"training": {"eval_at_s": marks, "eval_every_max_images": images}}}
             for marks, images in (([4, 12, 36], 2), ([2, 6, 18], 3))]
    assert definition_differences(*rungs) == [  # marks at the rungs: named by the pruner keys that set them
        "the pruner's marks (pruner.type, eval_at, and the rungs: min_resource, reduction_factor, "
        "min_early_stopping_rate, max_resource; budget.seconds) (config.training.eval_at_s): [4, 12, 36] → [2, 6, 18]",
        "pruner.eval_images (config.training.eval_every_max_images): 2 → 3"]
    # the same key set by the study file's [settings] is named so
    assert definition_differences(*rungs, settings={"training.eval_every_max_images"})[1] == (
        'settings."training.eval_every_max_images" (config.training.eval_every_max_images): 2 → 3')
    many = definition_differences({}, {f"k{i}": i for i in range(6)})
    assert len(many) == 5 and many[-1] == "and 2 more"


def test_best_config_of_the_demo_study_says_to_train_without_scene(tmp_path):
    from types import SimpleNamespace

    from ngptune.tuning.layout import StudyDir
    from ngptune.tuning.outputs import write_best_config
    from trainer.contract.config import dump_config

    spec = load_study(STUDIES / "demo.toml")
    config = tmp_path / "trial.config.json"
    config.write_text(dump_config(spec.base_config()) + "\n")
    trial = SimpleNamespace(number=0, user_attrs={"config_path": str(config), "is_default": True})
    header = write_best_config(trial, spec, StudyDir(tmp_path)).read_text().splitlines()
    assert spec.scene == "demo" and header[1] == (
        "// Tuned on the built-in demo scene and for it alone: train it without --scene (the trainer's scene when "
        "none is given); on another scene run a study there, as these settings may not suit it.")


def test_a_gpu_sized_study_is_named_before_it_runs_on_a_cpu():
    from ngptune.tuning.sweep import gpu_sized_study_warning

    capture, demo = load_study(STUDIES / "capture.toml"), load_study(STUDIES / "demo.toml")
    assert gpu_sized_study_warning(capture, capture.base_config(), 0) == (
        f"{capture.path}: its trials train 262,144 samples per step, a study sized for a GPU: on a CPU each step "
        "takes seconds and each trial minutes of start-up and evaluation; studies/demo.toml is the CPU study")
    assert gpu_sized_study_warning(capture, capture.base_config(), 1) is None  # a GPU host
    assert gpu_sized_study_warning(demo, demo.base_config(), 0) is None  # the CPU study

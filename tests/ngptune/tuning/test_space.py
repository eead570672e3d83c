"""Search space, NCCL environment and objective values, without launching anything."""

from __future__ import annotations

import math

import optuna
import pytest

from ngptune.tuning import nccl
from ngptune.tuning.objectives import (
    TargetNotReached,
    intermediate_values,
    mean_phase_ms,
    objective_value,
    throughput_samples_per_s,
)
from ngptune.tuning.outputs import representative_trial
from ngptune.tuning.space import check_combination, default_params, sample, split_values, trial_config
from ngptune.tuning.study import load_study
from tests.support.studies import write_study
from trainer.contract.errors import ConfigError

SPACE = (
    '[params."parallel.mode"]\ntype = "categorical"\nchoices = ["data", "subgrid"]\n'
    '[params."parallel.num_subgrids"]\ntype = "int"\nlow = 2\nhigh = 4\nwhen = { "parallel.mode" = "subgrid" }\n'
    '[params."parallel.compression"]\ntype = "categorical"\nchoices = ["none", "bf16"]\nwhen = { "parallel.mode" = "data" }\n'
    '[params."encoding.log2_hashmap_size"]\ntype = "int"\nlow = 13\nhigh = 16\n'
    '[params."training.max_march_steps"]\ntype = "categorical"\nchoices = [128, 256]\n'
    '[params.NCCL_ALGO]\ntype = "categorical"\nchoices = ["Ring", "Tree"]\n'
    '[params.NCCL_BUFFSIZE]\ntype = "categorical"\nchoices = [1048576, 4194304]\n'
)


@pytest.fixture
def spec(tmp_path, demo_scene):
    path = write_study(tmp_path / "space.toml", scene=demo_scene, params=SPACE,
                       settings={"encoding.log2_hashmap_size": None, "training.max_march_steps": None})
    return load_study(path)


def _samples(spec, nccl_active: bool, n: int = 40) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    out = []
    for _ in range(n):
        trial = study.ask()
        values = sample(trial, spec, nccl_active=nccl_active)
        assert trial.params == values  # nothing sampled that is not returned
        study.tell(trial, 1.0)
        out.append(values)
    return out


def test_conditional_parameters_follow_their_condition(spec):
    samples = _samples(spec, nccl_active=False)
    modes = {s["parallel.mode"] for s in samples}
    assert modes == {"data", "subgrid"}
    for s in samples:
        assert ("parallel.num_subgrids" in s) == (s["parallel.mode"] == "subgrid")
        assert ("parallel.compression" in s) == (s["parallel.mode"] == "data")
        if "parallel.num_subgrids" in s:
            assert s["parallel.num_subgrids"] in (2, 3, 4)
        assert 13 <= s["encoding.log2_hashmap_size"] <= 16


def test_nccl_parameters_inactive_on_gloo_and_allowed_when_active(spec):
    assert not any(nccl.is_nccl_name(k) for s in _samples(spec, nccl_active=False) for k in s)
    active = _samples(spec, nccl_active=True)
    assert {s["NCCL_ALGO"] for s in active} == {"Ring", "Tree"}
    for s in active:
        trainer, env = split_values(s)
        assert set(env) == {"NCCL_ALGO", "NCCL_BUFFSIZE"} and not any(nccl.is_nccl_name(k) for k in trainer)
        assert env["NCCL_BUFFSIZE"] in ("1048576", "4194304")
        for name, value in s.items():
            if nccl.is_nccl_name(name):
                nccl.check_nccl_value(name, value)


def test_default_trial_takes_base_values_where_the_space_has_them(spec):
    base = spec.base_config()
    defaults = default_params(spec, base)
    # parallel.mode data (base) → compression none (base); num_subgrids inactive; log2 12 (TINY
    # value removed → trainer default null) is outside 13..16; max_march_steps 1024 not a choice;
    # NCCL never (NCCL's own choice).
    assert defaults == {"parallel.mode": "data", "parallel.compression": "none"}
    study = optuna.create_study()
    study.enqueue_trial(defaults, user_attrs={"is_default": True})
    trial = study.ask()
    assert sample(trial, spec, nccl_active=True, only=set(defaults)) == defaults
    assert trial.user_attrs["is_default"] is True


def test_invalid_combinations_are_caught_before_launch(spec):
    base = spec.base_config()
    cfg = trial_config(base, {"parallel.mode": "subgrid", "parallel.num_subgrids": 2}, "/scene")
    assert cfg.data.scene == "/scene"
    check_combination(cfg, {}, nproc_per_node=2, nccl_active=False)
    with pytest.raises(ConfigError, match=r"parallel\.num_subgrids: .*world size 4"):
        check_combination(cfg, {}, nproc_per_node=4, nccl_active=True)
    emulated = trial_config(base, {"distributed.emulate_interconnect": "pcie"}, "/scene")
    with pytest.raises(ConfigError, match=r"distributed\.emulate_interconnect"):
        check_combination(emulated, {}, nproc_per_node=2, nccl_active=False)
    check_combination(emulated, {}, nproc_per_node=2, nccl_active=True)
    with pytest.raises(ConfigError, match=r"NCCL_MIN_NCHANNELS: expected at most NCCL_MAX_NCHANNELS \(2\), got 4"):
        check_combination(cfg, {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "2"}, nproc_per_node=2, nccl_active=True)
    with pytest.raises(ConfigError, match=r"training\.max_rays_per_step"):
        trial_config(base, {"training.max_rays_per_step": 8}, "/scene")


def test_trial_environment():
    parent = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0", "NCCL_ALGO": "Tree", "NCCL_DEBUG_FILE": "/x",
              "NCCL_NVLS_ENABLE": "1", "PATH": "/bin"}
    env = nccl.trial_env(parent, {"NCCL_PROTO": "LL"}, nccl_active=True)
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_IB_HCA"] == "mlx5_0" and env["PATH"] == "/bin"
    assert "NCCL_ALGO" not in env  # the tuner's variable: not inherited
    assert "NCCL_DEBUG_FILE" not in env and env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_NVLS_ENABLE"] == "0"
    gloo = nccl.trial_env(parent, {}, nccl_active=False)
    assert gloo["NCCL_NVLS_ENABLE"] == "0" and "NCCL_DEBUG" not in gloo


def test_applied_values_read_back_from_nccl_debug_lines(tmp_path):
    (tmp_path / "rank0.log").write_text(
        "host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n"
        "host:1:1 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.\n"
        "host:1:1 [0] NCCL INFO Channel 00/02 : 0 1\n"
    )
    (tmp_path / "rank1.log").write_text("host:2:2 [1] NCCL INFO NCCL_ALGO set by environment to Tree\n")
    applied = nccl.parse_applied([tmp_path / "rank0.log", tmp_path / "rank1.log", tmp_path / "missing.log"])
    assert applied == {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "4194304"}


def _record(step: int, throughput: float, wall_time_s: float, **extra) -> dict:
    return {"step": step, "throughput_samples_per_s": throughput, "wall_time_s": wall_time_s, **extra}


def test_objective_values_from_metrics_and_status():
    records = [
        _record(10, 100.0, 1.0, train_psnr_db=12.0, march_ms=4.0),
        _record(20, 300.0, 2.0, train_psnr_db=14.0, eval_psnr_db=18.0, march_ms=2.0, comm_ms=1.0),
        _record(30, 500.0, 3.0, train_psnr_db=15.0, eval_psnr_db=21.5, march_ms=3.0, comm_ms=2.0),
    ]
    status = {"eval_psnr_db": 23.0, "train_time_s": 3.4}
    assert throughput_samples_per_s(records) == pytest.approx(400.0)  # first (warm-up) record left out
    assert throughput_samples_per_s(records[:1]) == pytest.approx(100.0)
    assert objective_value("psnr_at_budget_db", records, status) == 23.0
    assert objective_value("time_to_psnr_s", records, status, target_db=20.0) == 3.0
    assert objective_value("time_to_psnr_s", records, status, target_db=22.0) == 3.4  # reached at the final eval
    with pytest.raises(TargetNotReached, match=r"25 dB not reached .*best 23\.00 dB"):
        objective_value("time_to_psnr_s", records, status, target_db=25.0)
    assert objective_value("psnr_at_budget_db", records, {}) is None
    assert intermediate_values("throughput_samples_per_s", records) == [(10, 100.0), (20, 300.0), (30, 400.0)]
    assert intermediate_values("psnr_at_budget_db", records) == [(10, 12.0), (20, 14.0), (30, 15.0)]
    assert intermediate_values("time_to_psnr_s", records) == []
    assert mean_phase_ms(records) == {"march": pytest.approx(2.5), "comm": pytest.approx(1.5)}


def test_representative_of_a_pareto_front_is_nearest_the_ideal_point():
    study = optuna.create_study(directions=["maximize", "maximize"])
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    # (psnr dB, samples/s): front = A (30, 100), B (28, 300), C (20, 400); D (19, 90) dominated.
    for values in [(30.0, 100.0), (28.0, 300.0), (20.0, 400.0), (19.0, 90.0)]:
        study.add_trial(optuna.create_trial(values=list(values), params={"x": 0.5}, distributions=dist))
    # scaled distances to the ideal point: A (0, 1) → 1, B (0.2, 1/3) → 0.389, C (1, 0) → 1.
    assert representative_trial(study).number == 1
    single = optuna.create_study(direction="minimize")
    for v in (3.0, 1.0, 2.0):
        single.add_trial(optuna.create_trial(value=v, params={"x": 0.5}, distributions=dist))
    assert representative_trial(single).number == 1
    assert representative_trial(optuna.create_study()) is None
    assert math.isfinite(study.best_trials[0].values[0])


def test_tree_is_rejected_before_launch_on_one_node() -> None:
    """Forcing NCCL_ALGO=Tree among the GPUs of one host fails at the first all-reduce
    (ncclInvalidUsage on 2×H200, docs/benchmarks.md); the sweep's one-node trials refuse it early."""
    from trainer.contract.config import TrainConfig
    from trainer.contract.errors import ConfigError
    from ngptune.tuning.space import check_combination

    with pytest.raises(ConfigError, match="NCCL_ALGO: 'Tree' needs more than one node"):
        check_combination(TrainConfig(), {"NCCL_ALGO": "Tree"}, 2, True)
    check_combination(TrainConfig(), {"NCCL_ALGO": "Tree"}, 2, False)  # gloo: NCCL inactive, nothing to check
    check_combination(TrainConfig(), {"NCCL_ALGO": "Ring"}, 2, True)

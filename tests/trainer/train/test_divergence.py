"""A diverged run is called diverged: ``optimizer.learning_rate=1e30`` turns the parameters into NaN
within a step; the run stops with ``"state": "diverged"``, the step and the first non-finite
tensor, whichever step runs it (dynamic or fixed-capacity) and whatever error the NaN causes
first, and its last finite snapshot stays the run's model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.scenes import TINY
from trainer.contract.config import apply_overrides, config_to_dict, load_config
from trainer.train.divergence import DivergedError, check_interval, first_nonfinite

HUGE_LR = "optimizer.learning_rate=1e30"
FIELD_PARAMETERS = {"encoding.table", "density_mlp.linears.0.weight", "density_mlp.linears.1.weight",
                    "rgb_mlp.linears.0.weight", "rgb_mlp.linears.1.weight", "rgb_mlp.linears.2.weight"}


def _train(scene: Path, run: Path, tmp_path: Path, *extra: str) -> int:
    from trainer.cli import build_parser, train_command

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(config_to_dict(apply_overrides(load_config(None), TINY))))
    args = build_parser().parse_args(["--scene", str(scene), "--config", str(config), "--out", str(run), "--quiet",
                                      "--eval-max-images", "1", *extra])
    return train_command(args)


def _status(run: Path) -> dict:
    text = (run / "status.json").read_text()
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"status.json holds a bare {name}"))


def test_first_nonfinite_names_the_first_bad_tensor_in_one_read():
    named = [("a", torch.zeros(3)), ("steps", torch.arange(3)), ("b", torch.tensor([1.0, math.inf])),
             ("c", torch.tensor([math.nan]))]
    assert first_nonfinite(named) == "b"
    assert first_nonfinite(named[:2]) is None
    model = torch.nn.Linear(2, 2)
    check_interval({"loss": 0.5}, model, step=10)  # finite: nothing happens
    with pytest.raises(DivergedError) as err:
        check_interval({"loss": math.nan}, model, step=10)
    assert (err.value.step, err.value.tensor) == (10, "loss")
    with torch.no_grad():
        model.bias[1] = math.nan
    with pytest.raises(DivergedError) as err:
        check_interval({"loss": 0.5}, model, step=15)
    assert (err.value.step, err.value.tensor) == (15, "bias")
    assert str(err.value).startswith("training diverged at step 15: parameter bias is not finite (NaN or inf)")


def test_a_huge_learning_rate_is_diverged_and_the_last_finite_snapshot_is_kept(demo_scene, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(demo_scene, run, tmp_path, "--n-steps", "4", "--no-eval") == 0
    finite = run / "snapshots" / "step_0000004.pt"
    assert finite.is_file()
    # the same run resumed with a learning rate that blows the parameters up at step 5; the
    # snapshot due at step 6 would hold NaN and is refused, the one of step 4 stays the model
    code = _train(demo_scene, run, tmp_path, "--resume", str(finite), "--n-steps", "20", "--snapshot-every", "2",
                  "--set", HUGE_LR)
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and err[0].startswith("error: training diverged at step 6: parameter ")
    assert f"the last finite model is {finite}" in err[0] and "optimizer.learning_rate" in err[0]
    status = _status(run)
    assert status["state"] == "diverged" and status["diverged_step"] == 6
    assert status["nonfinite_tensor"] in FIELD_PARAMETERS
    assert status["snapshot"] == str(finite)
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == ["step_0000004.pt"]
    assert not (run / "eval.json").exists()  # no evaluation of a NaN model


def test_the_fixed_capacity_step_diverges_at_its_first_record(demo_scene, tmp_path):
    run = tmp_path / "run"
    code = _train(demo_scene, run, tmp_path, "--n-steps", "12", "--set", "training.cuda_graphs=off", "--set", HUGE_LR)
    assert code == 2
    status = _status(run)
    assert (status["state"], status["diverged_step"]) == ("diverged", 5)  # training.log_every = 5
    assert "snapshot" not in status and not (run / "snapshots").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 5 and records[-1]["loss"] is None  # NaN in the record is written as null


def test_an_empty_occupancy_grid_of_a_nan_model_is_named_as_divergence(demo_scene, tmp_path):
    run = tmp_path / "run"
    # no record before the occupancy warm-up ends (16 steps): the first error is "no ray sample hit
    # an occupied cell", which the NaN densities caused
    code = _train(demo_scene, run, tmp_path, "--n-steps", "40", "--set", "training.log_every=100", "--set", HUGE_LR)
    assert code == 2
    status = _status(run)
    assert status["state"] == "diverged" and status["diverged_step"] >= 16
    assert "then: no ray sample hit an occupied cell" in status["reason"]

"""Studies that cannot mean what they say: an empty search space (one default trial, one warning),
every parameter inactive on this host (refused), absurd trial counts and ranges (refused at load,
naming the key)."""

from __future__ import annotations

import argparse
import io

import pytest
from rich.console import Console

from ngptune.tuning.command import register
from ngptune.tuning.study import MAX_TRIALS, load_study
from ngptune.tuning.sweep import SweepOptions, run_sweep
from tests.support.studies import write_study
from trainer.contract.errors import ConfigError


def test_trials_above_the_bound_are_refused_in_the_file_and_on_the_command_line(tmp_path, capsys):
    path = write_study(tmp_path / "s.toml", trials=MAX_TRIALS + 1)
    with pytest.raises(ConfigError, match=rf"s\.toml: study\.trials: expected an integer in \[1, {MAX_TRIALS}\]"):
        load_study(path)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--trials", str(MAX_TRIALS + 1)])
    assert f"expected at most {MAX_TRIALS} trials" in capsys.readouterr().err


def test_a_range_no_device_can_hold_is_refused_at_load_naming_the_key(tmp_path):
    params = ('[params."training.target_samples_per_step"]\ntype = "int"\nlow = 1024\n'
              "high = 100000000000000000\n")
    path = write_study(tmp_path / "s.toml", params=params, settings={"training.target_samples_per_step": None})
    with pytest.raises(ConfigError, match=r"s\.toml: params\.training\.target_samples_per_step\.high: "
                                          r"expected an integer in \[256, 2147483648\]"):
        load_study(path)


def test_a_study_of_only_nccl_parameters_on_gloo_is_refused(tmp_path, demo_scene):
    params = '[params.NCCL_ALGO]\ntype = "categorical"\nchoices = ["Ring", "Tree"]\n'
    path = write_study(tmp_path / "s.toml", scene=demo_scene, params=params)
    with pytest.raises(ConfigError, match=r"params: every parameter \(NCCL_ALGO\) is an NCCL variable, inactive"):
        run_sweep(SweepOptions(study_path=path, nproc_per_node=1, out_dir=tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_empty_search_space_runs_one_default_trial_with_one_warning(tmp_path, demo_scene):
    path = write_study(tmp_path / "s.toml", scene=demo_scene, trials=3, budget="steps = 6\ntrial_timeout_s = 120")
    text = io.StringIO()
    result = run_sweep(SweepOptions(study_path=path, nproc_per_node=1, out_dir=tmp_path / "out"),
                       console=Console(file=text, width=300))
    out = text.getvalue()
    assert out.count("the search space is empty; running one trial of the default settings") == 1
    assert result.best_number == 0
    assert sorted(p.name for p in (tmp_path / "out" / "trials").iterdir() if p.is_dir()) == ["0"]


def test_a_missing_scene_is_worded_as_train_words_it(tmp_path):
    missing = tmp_path / "foxx"
    with pytest.raises(ConfigError) as exc:
        load_study(write_study(tmp_path / "s.toml"), scene=missing)
    assert str(exc.value) == f"--scene {missing}: scene path does not exist"

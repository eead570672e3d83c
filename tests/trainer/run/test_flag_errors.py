"""A bad value names where it came from: the flag (``--time-budget``), or ``--set`` and its key; a
block given a value says it is a block; a resume does not call a machine setting a training one."""

from __future__ import annotations

import argparse

import pytest

from trainer.contract.commandline import add_train_arguments
from trainer.contract.config import TrainConfig, apply_overrides, config_to_dict
from trainer.contract.config.resume import config_differences
from trainer.contract.errors import ConfigError
from trainer.run.settings import FLAG_OF_KEY, resolve_config


def _resolve(argv: list[str]) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return resolve_config(parser.parse_args(["--device", "cpu", *argv]))


def test_a_bad_flag_value_names_the_flag():
    with pytest.raises(ConfigError) as exc:
        _resolve(["--time-budget", "-5"])
    assert str(exc.value) == "--time-budget: expected a number > 0, got -5.0"  # a flag cannot say null


def test_a_bad_set_value_names_set_and_its_key():
    with pytest.raises(ConfigError) as exc:
        _resolve(["--set", "training.n_steps=0"])
    assert str(exc.value) == "--set training.n_steps: expected an integer >= 1, got 0"


def test_a_bad_set_value_is_refused_though_a_flag_of_its_key_wins():
    with pytest.raises(ConfigError) as exc:
        _resolve(["--set", "training.n_steps=-5", "--n-steps", "1"])
    assert str(exc.value) == "--set training.n_steps: expected an integer >= 1, got -5"
    assert _resolve(["--set", "training.n_steps=7", "--n-steps", "3"]).training.n_steps == 3  # a valid one: the flag


def test_a_block_given_a_value_is_told_it_is_a_block():
    with pytest.raises(ConfigError) as exc:
        _resolve(["--set", "training=3"])
    assert str(exc.value) == "--set: training is a block; set one of its keys, e.g. training.n_steps"


def test_every_flag_named_is_a_flag_of_train():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    flags = {option for action in parser._actions for option in action.option_strings}
    assert set(FLAG_OF_KEY.values()) <= flags


def test_a_resume_on_other_threads_or_device_changes_no_training_setting():
    saved = config_to_dict(apply_overrides(TrainConfig(), {"training.cpu_threads": 0}))
    now = apply_overrides(TrainConfig(), {"training.cpu_threads": 1, "training.seed": 7})
    assert config_differences(saved, now) == [f"training.seed: {TrainConfig().training.seed!r} → 7"]


def test_a_null_setting_resolving_to_the_saved_value_is_no_difference():
    """A run saved with optimizer.l2_reg 1e-6 resumed with null: the same when null resolves to 1e-6
    (the unbounded model), named with the value it resolves to otherwise (the box model's 0)."""
    saved = config_to_dict(apply_overrides(TrainConfig(), {"optimizer.l2_reg": 1e-6}))
    now = TrainConfig()
    assert config_differences(saved, now) == ["optimizer.l2_reg: 1e-06 → null"]
    assert config_differences(saved, now, {"optimizer.l2_reg": 1e-6}) == []
    assert config_differences(saved, now, {"optimizer.l2_reg": 0.0}) == ["optimizer.l2_reg: 1e-06 → null (0.0 here)"]
    assert config_differences(config_to_dict(now), now, {"optimizer.l2_reg": 0.0}) == []  # null both times

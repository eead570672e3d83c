"""Dotted-key overrides of a config (``training.precision=bf16``), from code or the command line."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import json5

from trainer.contract.config.blocks import BLOCKS, TrainConfig
from trainer.contract.config.io import config_from_dict, config_to_dict
from trainer.contract.config.rules import unknown_key
from trainer.contract.errors import ConfigError

__all__ = ["apply_overrides", "parse_override"]


def _dotted_keys() -> list[str]:
    return [f"{name}.{f.name}" for name, cls in BLOCKS.items() for f in dataclasses.fields(cls)]


def apply_overrides(cfg: TrainConfig, overrides: Mapping[str, object]) -> TrainConfig:
    """A copy of ``cfg`` with some values replaced, validated like a config file.

    Args:
        cfg: the config to start from.
        overrides: dotted key → value in JSON terms, e.g.
            ``{"training.precision": "bf16", "encoding.log2_hashmap_size": 15}``
            (``distributed.gpu_capabilities`` takes a list of objects).

    Returns:
        The new config; ``cfg`` is unchanged.

    Raises:
        ConfigError: ``"overrides: unknown key 'training.n_step' (did you mean
            'training.n_steps'?)"``, ``"overrides: training is a block; set one of its keys, e.g.
            training.n_steps"`` or ``"overrides: <dotted key>: expected ..., got ..."``.
    """
    data = config_to_dict(cfg)
    for dotted, value in overrides.items():
        block, _, name = str(dotted).partition(".")
        if block in data and not name and data[block]:
            raise ConfigError(f"overrides: {block} is a block; set one of its keys, e.g. "
                              f"{block}.{next(iter(data[block]))}")
        if block not in data or name not in data[block]:
            raise ConfigError(f"overrides: {unknown_key('', dotted, _dotted_keys())}")
        data[block][name] = value
    return config_from_dict(data, source="overrides")


def parse_override(text: str) -> tuple[str, object]:
    """Split a command-line override ``KEY=VALUE`` into the dotted key and its value.

    The value is read as JSON5 (``200`` → int, ``1e-3`` → float, ``null`` → None, ``true``,
    ``[...]``, ``{...}``, ``'quoted'``); text that is not JSON5 is taken as a string with the
    surrounding spaces removed (``training.precision=bf16`` → ``"bf16"``). Quote a string that
    would read as something else: ``data.scene='"123"'``.

    Raises:
        ConfigError: if ``text`` has no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. training.n_steps=200")
    try:
        value = json5.loads(raw)
    except RecursionError:
        raise ConfigError(f"override {key!r}: value nested too deeply") from None
    except ValueError:
        value = raw.strip()
    return key, value


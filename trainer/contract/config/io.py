"""Config I/O: a :class:`~trainer.contract.config.blocks.TrainConfig` from plain data or a JSON5 file,
and back to plain data or JSON text."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import json5

from trainer.contract.config.blocks import BLOCKS, TrainConfig
from trainer.contract.config.ngp import IGNORED_NGP_BLOCKS, block_reader
from trainer.contract.config.rules import block_to_dict, expect_object, unknown_key
from trainer.contract.errors import ConfigError

__all__ = ["config_from_dict", "config_to_dict", "dump_config", "load_config"]


def config_from_dict(d: Mapping, source: str = "<config>") -> TrainConfig:
    """Build a :class:`TrainConfig` from plain data (a parsed JSON/JSON5 object).

    Missing blocks and keys take their defaults; the instant-ngp forms described in the module
    docstring are normalised.

    Args:
        d: mapping of block name → mapping of key → value.
        source: where ``d`` came from (a file path), the first part of error messages.

    Returns:
        The validated config.

    Raises:
        ConfigError: ``"<source>: <dotted key>: expected <what>, got <value>"`` for a bad value,
            ``"<source>: unknown key '<dotted key>' (did you mean '<key>'?)"`` for an unknown key
            (including a top-level key that is not a block).
    """
    try:
        data = expect_object("top level", d)
        blocks = {}
        for name, value in data.items():
            if name in IGNORED_NGP_BLOCKS:
                expect_object(name, value)
                continue
            if name not in BLOCKS:
                raise unknown_key("", name, list(BLOCKS))
            blocks[name] = block_reader(name)(value, name)
        return TrainConfig(**blocks)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def config_to_dict(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """The config as plain JSON-serialisable data, every key present, optimizer in flat form.

    ``config_from_dict(config_to_dict(cfg)) == cfg`` holds for every config.
    """
    return {name: block_to_dict(getattr(cfg, name)) for name in BLOCKS}


def dump_config(cfg: TrainConfig) -> str:
    """The config as pretty-printed JSON (2-space indent), e.g. for ``--print-config``.

    The text is plain JSON, so :func:`load_config` (JSON5) and ``json.loads`` both read it back.
    """
    return json.dumps(config_to_dict(cfg), indent=2, allow_nan=False)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a dict, or ValueError on a repeated key (json5 names it)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("duplicate key")
    return found


def _parse_json5(text: str, source: str) -> object:
    """Parse JSON5 text; a syntax error names ``source`` with its line and column.

    Plain JSON (what :func:`dump_config` writes: a sweep trial's config, a run's ``config.json``)
    is read by the standard library's parser, the same values in a thousandth of the time
    (json5's parser takes ~50 ms of CPU for a full config, in every process that reads it); JSON5
    syntax, a repeated key or a syntax error goes to json5, which reads it or names the error."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):
        pass
    try:
        return json5.loads(text, allow_duplicate_keys=False)
    except RecursionError:
        raise ConfigError(f"{source}: JSON5 nested too deeply to be a config") from None
    except ValueError as exc:
        message = str(exc)
        located = re.fullmatch(r"<string>:(\d+) (.*) at column (\d+)", message, re.DOTALL)
        if located:
            line, what, column = located.groups()
            message = f"{source}:{line}:{column}: invalid JSON5: {_one_line(what)}"
            raise ConfigError(message) from None
        raise ConfigError(f"{source}: invalid JSON5: {_one_line(message)}") from None


def load_config(path: str | Path | None, overrides: Mapping[str, object] | None = None) -> TrainConfig:
    """Read a trainer config file (JSON5: JSON with comments and trailing commas), with dotted-key
    ``overrides`` (as :func:`~trainer.contract.config.apply_overrides`) applied.

    The file's values and the overrides are checked together, once (a process that starts a run
    validates its config once); an error is named as :func:`apply_overrides` of the file's
    config would name it.

    Args:
        path: the config file, or None for the defaults.
        overrides: dotted key → value in JSON terms, or None.

    Returns:
        The validated config. Paths inside it (``data.scene``, ``data.cache_dir``) are kept as
        written (relative paths are relative to the working directory, not to the file).

    Raises:
        ConfigError: if the file is missing or unreadable (naming the path), has a syntax error
            (``"<path>:<line>:<column>: invalid JSON5: ..."``) or holds a bad key or value
            (see :func:`config_from_dict`); an override as :func:`apply_overrides` says.
    """
    data, source = ({}, "<config>") if path is None else (_read_file(Path(path)), str(path))
    if not overrides:
        return TrainConfig() if path is None else config_from_dict(data, source=source)
    merged = _with_overrides(data, overrides)
    if merged is not None:
        try:
            return config_from_dict(merged, source=source)
        except ConfigError:
            pass  # named below as the file's config and then the overrides would name it
    from trainer.contract.config.overrides import apply_overrides

    return apply_overrides(config_from_dict(data, source=source), overrides)


def _with_overrides(data: object, overrides: Mapping[str, object]) -> dict[str, Any] | None:
    """``data`` (a parsed config file) with ``overrides`` written into its blocks, or None when
    they cannot be written into its form (an unknown key, a block in an instant-ngp nested form)."""
    if not isinstance(data, Mapping):
        return None
    merged = {name: dict(value) if isinstance(value, Mapping) else value for name, value in data.items()}
    fields = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in BLOCKS.items()}
    for dotted, value in overrides.items():
        block, _, name = str(dotted).partition(".")
        if name not in fields.get(block, ()):
            return None
        target = merged.setdefault(block, {})
        if not isinstance(target, dict) or "otype" in target or "nested" in target:
            return None
        target[name] = value
    return merged


def _read_file(p: Path) -> object:
    """The parsed JSON5 of the config file ``p``."""
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: config file is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file ({exc.strerror or exc})") from None
    return _parse_json5(text, str(p))


"""Reading the instant-ngp / tiny-cuda-nn forms of the config blocks (see :mod:`trainer.contract.config`):
the nested ``Ema → ExponentialDecay → Adam`` optimizer, the ``Composite`` direction encoding and
the top-level blocks of features this trainer does not have."""

from __future__ import annotations

from typing import Any

from trainer.contract.config.blocks import BLOCKS, DirEncodingConfig, OptimizerConfig
from trainer.contract.config.rules import block_from_dict, expect_object, is_int, rule_of, show_value, unknown_key
from trainer.contract.errors import ConfigError

__all__ = ["IGNORED_NGP_BLOCKS", "block_reader", "dir_encoding_from_dict", "optimizer_from_dict"]

# Top-level instant-ngp blocks for features this trainer does not have; accepted and ignored.
IGNORED_NGP_BLOCKS = ("distortion_map", "envmap")

# tiny-cuda-nn optimizer levels, outermost first: nested key → flat OptimizerConfig field.
_OPTIMIZER_LEVELS: dict[str, dict[str, str]] = {
    "Ema": {"decay": "ema_decay"},
    "ExponentialDecay": {
        "decay_start": "decay_start",
        "decay_interval": "decay_interval",
        "decay_base": "decay_base",
    },
    "Adam": {name: name for name in ("learning_rate", "beta1", "beta2", "epsilon", "l2_reg")},
}


def optimizer_from_dict(value: object, path: str) -> OptimizerConfig:
    """Read the flat form, or tiny-cuda-nn's nested ``Ema → ExponentialDecay → Adam`` form."""
    data = expect_object(path, value)
    if "otype" not in data:
        return block_from_dict(OptimizerConfig, data, path)
    flat: dict[str, Any] = {}
    levels = list(_OPTIMIZER_LEVELS)  # the levels still allowed at this depth
    visited: list[str] = []
    node, node_path = data, path
    while True:
        otype = node.get("otype")
        if otype not in levels:
            raise ConfigError(
                f"{node_path}.otype: expected one of {', '.join(levels)}, got {show_value(otype)}"
            )
        visited.append(otype)
        names = _OPTIMIZER_LEVELS[otype]
        wraps = otype != "Adam"
        for key, item in node.items():
            if key == "otype" or (wraps and key == "nested"):
                continue
            if key not in names:
                allowed = ["otype", *names, *(["nested"] if wraps else [])]
                raise unknown_key(node_path, key, allowed)
            flat[names[key]] = rule_of(OptimizerConfig, names[key]).from_json(
                f"{node_path}.{key}", item
            )
        if otype == "Ema" and "decay" not in node:
            raise ConfigError(f"{node_path}: missing key 'decay'")
        if not wraps:
            break
        if "nested" not in node:
            raise ConfigError(f"{node_path}: missing key 'nested' (the optimizer {otype} wraps)")
        levels = levels[levels.index(otype) + 1 :]
        node_path = f"{node_path}.nested"
        node = expect_object(node_path, node["nested"])
    if "ExponentialDecay" not in visited:  # tiny-cuda-nn then keeps the learning rate constant
        flat["decay_base"] = 1.0
    return OptimizerConfig(**flat)


# Entries of instant-ngp's Composite direction encoding that encode its optional per-ray extra
# dimensions (none in this trainer), ignored.
_IGNORED_DIR_ENCODINGS = ("Identity", "OneBlob")


def dir_encoding_from_dict(value: object, path: str) -> DirEncodingConfig:
    """Read ``{"otype": "SphericalHarmonics", ...}`` or instant-ngp's ``Composite`` form."""
    data = expect_object(path, value)
    otype = data.get("otype", "SphericalHarmonics")
    if otype == "SphericalHarmonics":
        return block_from_dict(DirEncodingConfig, data, path)
    if otype != "Composite":
        raise ConfigError(
            f"{path}.otype: expected one of SphericalHarmonics, Composite, got {show_value(otype)}"
        )
    for key in data:
        if key not in ("otype", "nested"):
            raise unknown_key(path, key, ["otype", "nested"])
    nested = data.get("nested")
    if not isinstance(nested, list) or not nested:
        raise ConfigError(f"{path}.nested: expected a non-empty list, got {show_value(nested)}")
    for i, entry in enumerate(nested[1:], start=1):
        entry_otype = expect_object(f"{path}.nested[{i}]", entry).get("otype")
        if entry_otype not in _IGNORED_DIR_ENCODINGS:
            raise ConfigError(
                f"{path}.nested[{i}].otype: expected one of {', '.join(_IGNORED_DIR_ENCODINGS)} "
                f"after the SphericalHarmonics entry, got {show_value(entry_otype)}"
            )
    sh_path = f"{path}.nested[0]"
    sh = dict(expect_object(sh_path, nested[0]))
    if sh.get("otype") != "SphericalHarmonics":
        raise ConfigError(
            f"{sh_path}.otype: expected SphericalHarmonics (it encodes the ray direction), "
            f"got {show_value(sh.get('otype'))}"
        )
    n_dims = sh.pop("n_dims_to_encode", 3)
    if not (is_int(n_dims) and n_dims == 3):
        raise ConfigError(f"{sh_path}.n_dims_to_encode: expected 3, got {show_value(n_dims)}")
    return block_from_dict(DirEncodingConfig, sh, sh_path)


def block_reader(name: str):
    """The reader ``(value, path) → block`` of the block ``name``: the instant-ngp forms for
    ``optimizer`` and ``dir_encoding``, the plain block form for the others."""
    if name == "optimizer":
        return optimizer_from_dict
    if name == "dir_encoding":
        return dir_encoding_from_dict
    return lambda value, path: block_from_dict(BLOCKS[name], value, path)


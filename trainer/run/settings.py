"""The settings of one training process: its config from the flags (file, ``--set``, dedicated
flags; the CPU preset on a CPU), its scene, and the line that opens the run."""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from trainer.contract.commandline import scene_format_overrides
from trainer.contract.config import TrainConfig, load_config, parse_override
from trainer.contract.defaults import default_config_path, runs_on_cpu
from trainer.contract.errors import ConfigError
from trainer.contract.textlines import counted, fit_lines

__all__ = ["FLAG_OF_KEY", "config_source", "device_name", "named_by_flag", "on_cpu", "opening_line", "resolve_config", "scene_path_of"]


def on_cpu(device: str | None) -> bool:
    """Whether ``training.device`` ``device`` (None: ``auto``) trains on this host's CPU
    (:func:`trainer.contract.defaults.runs_on_cpu` with the CUDA devices torch sees, counted
    without importing torch where possible: :func:`trainer.parallel.cuda_count.cuda_device_count`)."""
    from trainer.parallel.cuda_count import cuda_device_count

    return runs_on_cpu(device, cuda_device_count())


def device_name(name: str) -> str:
    """The device ``training.device`` ``name`` resolves to, as ``str(torch.device)`` writes it
    (``auto`` → ``cuda`` with a CUDA device, else ``cpu``), known without importing torch where
    possible (:func:`trainer.parallel.cuda_count.cuda_device_count`).

    Raises:
        ConfigError: ``cuda`` or ``cuda:N`` without a CUDA device (as
            :func:`trainer.train.build.resolve_device`).
    """
    from trainer.parallel.cuda_count import cuda_device_count

    if name == "cpu":
        return name
    cuda = cuda_device_count() > 0
    if name == "auto":
        return "cuda" if cuda else "cpu"
    if not cuda:
        raise ConfigError(f"training.device: '{name}' requested but no CUDA device is available")
    return name


def config_source(args: argparse.Namespace) -> str:
    """How the opening line names the run's config: the ``--config`` path, the CPU preset (chosen
    because none was given on a CPU), or the built-in defaults."""
    if args.config is not None:
        return str(args.config)
    if getattr(args, "config_chosen", None) is not None:
        return f"{args.config_chosen} (the CPU preset: no --config on a CPU)"
    return "built-in defaults"


def opening_line(cfg: TrainConfig, args: argparse.Namespace, ranks: int, local_ranks: int | None = None,
                 threads: str | None = None) -> str:
    """The first lines of a run (under 80 columns, :func:`~trainer.contract.textlines.fit_lines`;
    :func:`~trainer.contract.textlines.joined` gives the statement; no bracket inside another):
    scene, device, ranks (on a CPU then the threads per rank: ``threads``, the words of the count
    this process set, else :func:`trainer.contract.threads.describe_cpu_threads` for
    ``local_ranks`` ranks on this host, default ``ranks``), config and the stopping rule."""
    from trainer.contract.threads import describe_cpu_threads

    stop = counted(cfg.training.n_steps, "step")
    if cfg.training.time_budget_s is not None:
        stop += f" or {cfg.training.time_budget_s:g} s"
    device = device_name(cfg.training.device)
    if device == "cpu" and threads is None:
        threads = describe_cpu_threads(cfg.training.cpu_threads, local_ranks or ranks)
    threads = [f"{threads},"] if device == "cpu" else []
    return "\n".join(fit_lines([f"training {scene_path_of(cfg)}", f"on {device},", f"{counted(ranks, 'rank')},",
                                *threads, f"config {config_source(args)},", f"up to {stop}"]))


FLAG_OF_KEY = {
    "training.n_steps": "--n-steps", "training.time_budget_s": "--time-budget", "training.device": "--device",
    "training.precision": "--precision", "training.eval_every": "--eval-every",
    "training.eval_max_images": "--eval-max-images", "training.cpu_threads": "--cpu-threads",
    "training.snapshot_every": "--snapshot-every", "data.downscale": "--downscale",
    "profile.trace_steps": "--trace-steps", "distributed.emulate_interconnect": "--emulate-interconnect",
    "data.format": "--format", "data.camera_convention": "--camera-convention", "data.aabb_scale": "--aabb-scale",
    "data.scene": "--scene",
}
"""The config key each dedicated flag of ``train`` sets (an error in its value names the flag)."""

_OVERRIDE_ERROR = re.compile(r"overrides: ([\w.]+): (.*)", re.DOTALL)


def named_by_flag(error: ConfigError, flag_keys: Collection[str]) -> ConfigError:
    """``error`` of :func:`~trainer.contract.config.load_config`'s overrides, naming where the
    value came from: ``--time-budget: expected ...`` for a key of ``flag_keys``
    (:data:`FLAG_OF_KEY`), ``--set training.seed: expected ...`` for another key, ``--set: ...``
    for an error about no one key; any other error unchanged."""
    message = str(error)
    found = _OVERRIDE_ERROR.fullmatch(message)
    if found and found.group(1) in flag_keys:  # a flag cannot say null: its absence does
        return ConfigError(f"{FLAG_OF_KEY[found.group(1)]}: {found.group(2).replace('expected null or ', 'expected ', 1)}")
    if found:
        return ConfigError(f"--set {found.group(1)}: {found.group(2)}")
    if message.startswith("overrides: "):
        return ConfigError("--set: " + message[len("overrides: "):])
    return error


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """Config file (``--config``; without it the CPU preset on a CPU, :func:`default_config_path`)
    + ``--set`` overrides + dedicated flags (a flag wins over ``--set`` of its key, whose value
    must still be valid), validated. Sets ``args.config_chosen`` to the preset
    path when it was chosen.

    Raises:
        ConfigError: a bad value, naming its flag (``--time-budget: ...``) or ``--set`` key
            (:func:`named_by_flag`); a bad config file, naming the file.
    """
    overrides: dict[str, Any] = {}
    for item in args.overrides:
        key, value = parse_override(item)
        overrides[key] = value
    path = default_config_path(args.config, on_cpu(args.device or overrides.get("training.device")))
    args.config_chosen = path if args.config is None else None
    flag_map = {
        "training.n_steps": args.n_steps,
        "training.time_budget_s": args.time_budget_s,
        "training.device": args.device,
        "training.precision": args.precision,
        "training.eval_every": args.eval_every,
        "training.eval_max_images": args.eval_max_images,
        "training.cpu_threads": getattr(args, "cpu_threads", None),
        "training.snapshot_every": args.snapshot_every,
        "data.downscale": args.downscale,
        "profile.trace_steps": getattr(args, "trace_steps", None),
        "distributed.emulate_interconnect": getattr(args, "emulate_interconnect", None),
    }
    flagged = {k: v for k, v in flag_map.items() if v is not None} | scene_format_overrides(args)
    if args.scene is not None:
        flagged["data.scene"] = str(args.scene)
    for key in sorted(set(overrides) & set(flagged)):  # the flag wins; a bad --set value is still refused
        if overrides[key] != flagged[key]:
            try:
                load_config(path, {key: overrides[key]})
            except ConfigError as exc:
                raise named_by_flag(exc, ()) from None
    overrides.update(flagged)
    if args.quiet:
        overrides["training.quiet"] = True
    try:
        return load_config(path, overrides)  # file and flags checked together, once
    except ConfigError as exc:
        raise named_by_flag(exc, flagged) from None


def scene_path_of(cfg: TrainConfig) -> Path:
    if cfg.data.scene:
        return Path(cfg.data.scene)
    from trainer.data.demo import demo_scene_path

    return demo_scene_path()

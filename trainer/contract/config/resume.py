"""What a resumed run changes: the training settings in which a config differs from the one a
snapshot or checkpoint was written with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trainer.contract.config.blocks import TrainConfig
from trainer.contract.config.io import config_to_dict

__all__ = ["RUN_CONTROL_KEYS", "config_differences"]


# Keys that say how long or how visibly a run goes, or where and on how many threads it runs, not what
# it trains: they may change on resume.
RUN_CONTROL_KEYS = frozenset({
    "training.n_steps", "training.time_budget_s", "training.eval_every", "training.eval_at_s", "training.eval_max_images",
    "training.eval_every_max_images",
    "training.eval_spp", "training.log_every", "training.tensorboard", "training.snapshot_every", "training.quiet",
    "training.device", "training.cpu_threads",  # machine settings: where and with how many threads
    "profile", "faults", "distributed", "parallel.balance_every",
    "data.scene",  # a path, spelled relative to where each run started; a scene change shows in the shapes
})


def config_differences(saved: Mapping[str, Any], current: TrainConfig,
                       resolved: Mapping[str, Any] | None = None) -> list[str]:
    """The training settings in which ``current`` differs from ``saved`` (``config_to_dict`` of the
    config a snapshot or checkpoint was written with), as ``"key: saved → current"`` lines; keys
    of :data:`RUN_CONTROL_KEYS` (and the blocks named there) are left out.

    Args:
        saved: ``{block: {key: value}}`` as stored in a snapshot/checkpoint; unknown blocks or keys
            are skipped (written by another version).
        current: the config of the run that resumes.
        resolved: the values the resuming run chose for its null settings (dotted key → value,
            ``derived_settings``): a saved value equal to its null's is no difference, another is
            shown with it (``"optimizer.l2_reg: 1e-06 → null (0 here)"``).
    """
    resolved = resolved or {}
    now = json.loads(json.dumps(config_to_dict(current)))  # tuples → lists, as stored in JSON
    saved = json.loads(json.dumps(saved, default=list)) if isinstance(saved, Mapping) else {}
    lines = []
    for block, values in now.items():
        theirs = saved.get(block)
        if block in RUN_CONTROL_KEYS or not isinstance(theirs, Mapping):
            continue
        for key, value in values.items():
            dotted = f"{block}.{key}"
            if dotted in RUN_CONTROL_KEYS or key not in theirs:
                continue
            if value is None and theirs[key] is not None and dotted in resolved:
                if theirs[key] != resolved[dotted]:
                    lines.append(f"{dotted}: {_shown(theirs[key])} → null ({_shown(resolved[dotted])} here)")
            elif theirs[key] != value:
                lines.append(f"{dotted}: {_shown(theirs[key])} → {_shown(value)}")
    return lines


def _shown(value: Any) -> str:
    """A config value in a difference line as its JSON reads (``null``, ``true``), strings and
    numbers as Python writes them (``'L2'``, ``0.05``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return repr(value)

"""Host checks made once, before a sweep's first trial.

A problem of the host (a socket interface named in ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``
that it does not have, a scene that is gone) would fail every trial the same way, one launch after
another, and the study would fill with failures that say nothing about the settings. So before
the first trial the sweep asks the trainer's launcher to check this host for the study's config,
in the environment every trial gets (``python -m trainer --check-host``: the checks that do not
depend on a trial's settings; it starts no rank and writes nothing); a refusal ends the sweep with
that one line. Settings that do not fit together stay a trial's own problem (pruned before its
launch, :func:`ngptune.tuning.space.check_combination`).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ngptune.tuning.storage import SweepError
from trainer.contract import error_or_last_line, trainer_argv

__all__ = ["PREFLIGHT_TIMEOUT_S", "check_host"]

PREFLIGHT_TIMEOUT_S = 120.0
"""How long the check may take."""


def check_host(config_text: str, env: Mapping[str, str]) -> None:
    """Check this host for a run of ``config_text`` (a trainer config naming the study's scene).

    Args:
        config_text: the config file's text.
        env: the trials' environment (NCCL and site variables included).

    Raises:
        SweepError: one line, ``pre-flight check before the first trial: <the launcher's error>``.
    """
    with tempfile.TemporaryDirectory(prefix="ngptune-preflight-") as folder:
        config = Path(folder) / "default.config.json"
        config.write_text(config_text, encoding="utf-8")
        argv = trainer_argv(config=config, quiet=True, check_host=True)
        try:
            done = subprocess.run(argv, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=PREFLIGHT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SweepError(f"pre-flight check before the first trial: no answer within {PREFLIGHT_TIMEOUT_S:g} s "
                             f"({' '.join(argv[1:])})") from None
    if done.returncode != 0:
        message = error_or_last_line(done.stderr) or error_or_last_line(done.stdout) or f"exit status {done.returncode}"
        raise SweepError(f"pre-flight check before the first trial: {message}; no trial was started")

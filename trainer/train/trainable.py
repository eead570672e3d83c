"""What a config may hold but training cannot use, refused before any rank starts (stdlib only:
a launcher checks it without loading torch)."""

from __future__ import annotations

from trainer.contract.config import TrainConfig
from trainer.contract.errors import ConfigError

__all__ = ["check_trainable"]


def check_trainable(cfg: TrainConfig) -> None:
    """Settings a config may hold but training cannot use (checked before any rank starts too).

    Raises:
        ConfigError: ``encoding.table_dtype`` float16 (Adam's moments and epsilon underflow in
            float16 and the loss turns NaN; float16 tables are for the encoding kernels and
            bench/encoding.py).
    """
    if cfg.encoding.table_dtype != "float32":
        raise ConfigError(
            f"encoding.table_dtype: training needs 'float32' tables, got {cfg.encoding.table_dtype!r} "
            "(float16 tables are for the encoding kernels and bench/encoding.py: Adam's moments and its "
            "epsilon underflow in float16 and the loss turns NaN)"
        )

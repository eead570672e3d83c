"""The radiance field (DESIGN.md §2): :class:`NGPField` = hash grid → density MLP → colour MLP."""

from trainer.model.field import NGPField, trunc_exp
from trainer.model.mlp import MLP, MLPConfig

__all__ = ["MLP", "MLPConfig", "NGPField", "trunc_exp"]

"""Input encodings of the field (DESIGN.md §2).

* :mod:`~trainer.encoding.hashgrid` — :class:`HashGridConfig`, level layout and the PyTorch
  reference multiresolution hash encoding (the slow twin every fast backend is tested against).
* :mod:`~trainer.encoding.backends` — one interface over the torch / triton / tcnn backends and
  the :class:`HashGridEncoding` module.
* :mod:`~trainer.encoding.sh` — spherical-harmonics direction encoding (16 coefficients).
"""

from trainer.encoding.backends import (
    HashGridBackend,
    HashGridEncoding,
    get_backend,
    register_backend,
    registered_backends,
)
from trainer.encoding.hashgrid import (
    HashGridConfig,
    hash_grid_encode_reference,
    level_offsets,
    level_resolutions,
    level_table_sizes,
)
from trainer.encoding.sh import SH_OUTPUT_DIM, sh_encode

__all__ = [
    "SH_OUTPUT_DIM",
    "HashGridBackend",
    "HashGridConfig",
    "HashGridEncoding",
    "get_backend",
    "hash_grid_encode_reference",
    "level_offsets",
    "level_resolutions",
    "level_table_sizes",
    "register_backend",
    "registered_backends",
    "sh_encode",
]

"""The typed trainer config: instant-ngp / tiny-cuda-nn JSON layout plus ngptune's own blocks.

A config is a JSON5 object (``//`` comments and trailing commas allowed, so configs pasted from
articles load) with up to twelve blocks, each a frozen dataclass that validates its fields at
construction::

    encoding  network  rgb_network  dir_encoding  optimizer  loss     (instant-ngp layout)
    training  data     parallel     distributed  profile  faults      (ngptune's blocks)

Missing blocks and keys take the defaults of :mod:`trainer.contract.config.blocks` (instant-ngp's NeRF
defaults, DESIGN.md §2).
Unknown keys and bad values raise :class:`~trainer.contract.errors.ConfigError` with a one-line message
that names the source, the dotted key and the value, e.g.
``configs/x.json: encoding.log2_hashmap_size: expected null or an integer in [10, 24], got 32``.
Types are strict: ``true`` is not an integer, ``16.0`` is not an integer, but an integer is
accepted where a number is expected (and stored as a float).

Accepted instant-ngp / tiny-cuda-nn forms, normalised on load:

* ``optimizer`` in tiny-cuda-nn's nested form ``Ema → ExponentialDecay → Adam`` (each level
  optional except Adam) becomes the flat form; errors name the nested path, e.g.
  ``optimizer.nested.nested.learning_rate``. Without an ``ExponentialDecay`` level the learning
  rate is constant (``decay_base`` 1.0); without ``Ema`` there is no weight EMA. Adam keys that
  are left out take :class:`OptimizerConfig`'s defaults (instant-ngp's NeRF values), not
  tiny-cuda-nn's.
* ``dir_encoding`` as ``{"otype": "Composite", "nested": [SH, ...]}``: the first entry must be
  ``SphericalHarmonics`` (it encodes the 3 direction dims) and is taken; later ``Identity`` and
  ``OneBlob`` entries are ignored, because in instant-ngp they encode the optional per-ray extra
  dimensions, which this trainer does not have (they would receive no inputs). Any other nested
  otype is an error naming ``dir_encoding.nested[i].otype``.
* The top-level instant-ngp blocks ``distortion_map`` and ``envmap`` (learned lens distortion and
  environment map, features this trainer does not have) are ignored, so instant-ngp's
  ``configs/nerf/base.json`` loads as is; they are not kept by :func:`config_to_dict`.

Derived values (the finest hash-grid resolution, the cone angle) are computed by methods of the
blocks from the config and the scene's ``aabb_scale``; they are never written back.

The package, one concern per module (everything public is re-exported here)::

    rules.py      the field rules and the block base class (checking, JSON in and out)
    blocks.py     the twelve blocks, TrainConfig, BLOCKS, field_rule (a field's rule by dotted key)
    ngp.py        reading the instant-ngp / tiny-cuda-nn forms
    io.py         config_from_dict / config_to_dict, JSON5 files in, JSON text out
    overrides.py  dotted-key overrides (apply_overrides, parse_override)
    resume.py     the settings a resumed run changes (config_differences)
"""

from trainer.contract.config import blocks, io, overrides, resume
from trainer.contract.config.blocks import *  # noqa: F403  (the names of each module's __all__)
from trainer.contract.config.io import *  # noqa: F403
from trainer.contract.config.ngp import IGNORED_NGP_BLOCKS
from trainer.contract.config.overrides import *  # noqa: F403
from trainer.contract.config.resume import *  # noqa: F403
from trainer.contract.config.rules import Rule, is_int, is_number, parse_step_window, show_value

__all__ = [
    *blocks.__all__,
    *io.__all__,
    *overrides.__all__,
    *resume.__all__,
    "IGNORED_NGP_BLOCKS",
    "Rule",
    "is_int",
    "is_number",
    "parse_step_window",
    "show_value",
]

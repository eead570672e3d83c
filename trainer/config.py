"""The typed trainer config: instant-ngp / tiny-cuda-nn JSON layout plus ngptune's own blocks.

A config is a JSON5 object (``//`` comments and trailing commas allowed, so configs pasted from
articles load) with up to twelve blocks, each a frozen dataclass that validates its fields at
construction::

    encoding  network  rgb_network  dir_encoding  optimizer  loss     (instant-ngp layout)
    training  data     parallel     distributed  profile  faults      (ngptune's blocks)

Missing blocks and keys take the defaults below (instant-ngp's NeRF defaults, DESIGN.md §2).
Unknown keys and bad values raise :class:`~trainer.errors.ConfigError` with a one-line message
that names the source, the dotted key and the value, e.g.
``configs/x.json: encoding.log2_hashmap_size: expected an integer in [10, 24], got 32``.
Types are strict: ``true`` is not an integer, ``16.0`` is not an integer, but an integer is
accepted where a number is expected (and stored as a float).

Accepted instant-ngp / tiny-cuda-nn forms, normalised on load:

* ``optimizer`` in tiny-cuda-nn's nested form ``Ema → ExponentialDecay → Adam`` (each level
  optional except Adam) becomes the flat form; errors name the nested path, e.g.
  ``optimizer.nested.nested.learning_rate``. Without an ``ExponentialDecay`` level the learning
  rate is constant (``decay_base`` 1.0); without ``Ema`` there is no weight EMA. Adam keys that
  are left out take this module's defaults (instant-ngp's NeRF values), not tiny-cuda-nn's.
* ``dir_encoding`` as ``{"otype": "Composite", "nested": [SH, ...]}``: the first entry must be
  ``SphericalHarmonics`` (it encodes the 3 direction dims) and is taken; later ``Identity`` and
  ``OneBlob`` entries are ignored, because in instant-ngp they encode the optional per-ray extra
  dimensions, which this trainer does not have (they would receive no inputs). Any other nested
  otype is an error naming ``dir_encoding.nested[i].otype``.
* The top-level instant-ngp blocks ``distortion_map`` and ``envmap`` (learned lens distortion and
  environment map, features this trainer does not have) are ignored, so instant-ngp's
  ``configs/nerf/base.json`` loads as is; they are not kept by :func:`config_to_dict`.

Derived values (the per-level scale of the hash grid, the cone angle) are computed by methods
from the config and the scene's ``aabb_scale``; they are never written back.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import json5

from trainer.errors import ConfigError

__all__ = [
    "BLOCKS",
    "DataConfig",
    "DirEncodingConfig",
    "DistributedConfig",
    "EncodingConfig",
    "FaultsConfig",
    "GpuCapability",
    "LossConfig",
    "NetworkConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "ProfileConfig",
    "RGBNetworkConfig",
    "TrainConfig",
    "TrainingConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "load_config",
    "parse_override",
    "parse_step_window",
]

# instant-ngp's finest hash-grid resolution over the unit cube for NeRF (src/testbed.cu,
# ``reset_network``: ``desired_resolution = 2048``), multiplied by the scene's aabb_scale.
NGP_DESIRED_RESOLUTION = 2048

# Top-level instant-ngp blocks for features this trainer does not have; accepted and ignored.
IGNORED_NGP_BLOCKS = ("distortion_map", "envmap")


# --------------------------------------------------------------------------------------------
# Field rules: how one field is checked, read from JSON data and written back to it.
# --------------------------------------------------------------------------------------------


def _show(value: object) -> str:
    """The value as it appears in an error message (``repr``, shortened to one short line)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


class _Rule(abc.ABC):
    """Check and conversion of one config field. ``description`` completes "expected ..."."""

    description: str

    @abc.abstractmethod
    def accepts(self, value: object) -> bool:
        """Whether ``value`` is valid for the field."""

    def convert(self, value: Any) -> Any:
        """JSON value (already accepted) → the value stored in the dataclass."""
        return value

    def check(self, key: str, value: object) -> None:
        if not self.accepts(value):
            raise ConfigError(f"{key}: expected {self.description}, got {_show(value)}")

    def from_json(self, key: str, value: object) -> Any:
        self.check(key, value)
        return self.convert(value)

    def to_json(self, value: Any) -> Any:
        return value


class _Int(_Rule):
    def __init__(
        self,
        lo: int,
        hi: int | None = None,
        *,
        multiple_of: int = 1,
        power_of_two: bool = False,
    ) -> None:
        self.lo, self.hi, self.multiple_of, self.power_of_two = lo, hi, multiple_of, power_of_two
        if power_of_two:
            self.description = f"a power of two in [{lo}, {hi}]"
        elif multiple_of == 2:
            self.description = f"an even integer in [{lo}, {hi}]"
        elif multiple_of > 1:
            self.description = f"a multiple of {multiple_of} in [{lo}, {hi}]"
        elif hi is not None:
            self.description = f"an integer in [{lo}, {hi}]"
        else:
            self.description = f"an integer >= {lo}"

    def accepts(self, value: object) -> bool:
        if not _is_int(value):
            return False
        assert isinstance(value, int)
        if value < self.lo or (self.hi is not None and value > self.hi):
            return False
        if self.power_of_two and value & (value - 1):
            return False
        return value % self.multiple_of == 0


class _Float(_Rule):
    """A finite number; integers are accepted and stored as floats."""

    def __init__(
        self,
        lo: float | None = None,
        hi: float | None = None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open
        if lo is not None and hi is not None:
            left, right = "(" if lo_open else "[", ")" if hi_open else "]"
            self.description = f"a number in {left}{lo}, {hi}{right}"
        elif lo is not None:
            self.description = f"a number {'>' if lo_open else '>='} {lo}"
        else:
            self.description = "a finite number"

    def accepts(self, value: object) -> bool:
        if not _is_number(value):
            return False
        assert isinstance(value, (int, float))
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True

    def convert(self, value: Any) -> float:
        return float(value)


class _OneOf(_Rule):
    """One of a fixed set of values, compared with their exact type (``True`` is not ``1``)."""

    def __init__(self, *choices: object) -> None:
        self.choices = choices
        names = ", ".join(str(c) for c in choices)
        self.description = names if len(choices) == 1 else f"one of {names}"

    def accepts(self, value: object) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)


class _Bool(_Rule):
    description = "true or false"

    def accepts(self, value: object) -> bool:
        return isinstance(value, bool)


class _Str(_Rule):
    def __init__(self, *, allow_empty: bool = False) -> None:
        self.allow_empty = allow_empty
        self.description = "a string" if allow_empty else "a non-empty string"

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and (self.allow_empty or value != "")


class _Device(_Rule):
    description = "auto, cpu, cuda or cuda:N"
    _PATTERN = re.compile(r"auto|cpu|cuda(:[0-9]+)?")

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and self._PATTERN.fullmatch(value) is not None


class _Optional(_Rule):
    """``null`` or a value of the inner rule."""

    def __init__(self, inner: _Rule) -> None:
        self.inner = inner
        self.description = f"null or {inner.description}"

    def accepts(self, value: object) -> bool:
        return value is None or self.inner.accepts(value)

    def convert(self, value: Any) -> Any:
        return None if value is None else self.inner.convert(value)


class _Entries(_Rule):
    """A list of objects, each read into the dataclass ``cls``; stored as a tuple."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.description = "a list of objects"

    def accepts(self, value: object) -> bool:
        return isinstance(value, tuple) and all(isinstance(e, self.cls) for e in value)

    def from_json(self, key: str, value: object) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {self.description}, got {_show(value)}")
        return tuple(
            _block_from_dict(self.cls, entry, f"{key}[{i}]") for i, entry in enumerate(value)
        )

    def to_json(self, value: Any) -> list:
        return [_block_to_dict(entry) for entry in value]


class _IntList(_Rule):
    """A list of integers >= ``lo`` without repeats; stored as a tuple."""

    def __init__(self, lo: int) -> None:
        self.lo = lo
        self.description = f"a list of distinct integers >= {lo}"

    def accepts(self, value: object) -> bool:
        return (
            isinstance(value, (list, tuple))
            and all(_is_int(v) and v >= self.lo for v in value)
            and len(set(value)) == len(value)
        )

    def convert(self, value: Any) -> tuple:
        return tuple(value)

    def to_json(self, value: Any) -> list:
        return list(value)


class _StepWindow(_Rule):
    """``"A:B"`` with integers 0 <= A < B: steps A..B-1."""

    description = 'a step window "A:B" with 0 <= A < B'
    _PATTERN = re.compile(r"([0-9]+):([0-9]+)")

    def accepts(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        match = self._PATTERN.fullmatch(value)
        return match is not None and int(match.group(1)) < int(match.group(2))


def parse_step_window(window: str) -> tuple[int, int]:
    """``"A:B"`` → ``(A, B)`` (already validated by the config)."""
    start, stop = window.split(":")
    return int(start), int(stop)


_REQUIRED = dataclasses.MISSING


def _field(default: Any, rule: _Rule) -> Any:
    """A dataclass field with its rule; ``default=_REQUIRED`` makes the key required."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def _rule_of(cls: type, name: str) -> _Rule:
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls)}[name]


class _Block:
    """Base of the block dataclasses: checks every field against its rule at construction.

    ``_PATH`` is the block's dotted path in error messages; ``_check_relations`` holds checks
    between fields.
    """

    _PATH: ClassVar[str]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            f.metadata["rule"].check(f"{self._PATH}.{f.name}", getattr(self, f.name))
        self._check_relations()

    def _check_relations(self) -> None:
        pass


def _unknown_key(path: str, key: object, candidates: list[str]) -> ConfigError:
    """The error for a key that is not in ``candidates``, with difflib's closest suggestion."""
    dotted = f"{path}.{key}" if path else str(key)
    close = difflib.get_close_matches(str(key), candidates, n=1)
    if close:
        return ConfigError(f"unknown key {dotted!r} (did you mean {close[0]!r}?)")
    return ConfigError(f"unknown key {dotted!r} (expected one of {', '.join(candidates)})")


def _expect_object(path: str, value: object) -> Mapping:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected an object, got {_show(value)}")
    return value


def _block_from_dict(cls: type, value: object, path: str) -> Any:
    """Read one block (or list entry) of class ``cls`` from JSON data found at ``path``."""
    data = _expect_object(path, value)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, item in data.items():
        if key not in fields:
            raise _unknown_key(path, key, list(fields))
        kwargs[key] = fields[key].metadata["rule"].from_json(f"{path}.{key}", item)
    for name, f in fields.items():
        if name not in kwargs and f.default is _REQUIRED:
            raise ConfigError(f"{path}: missing key {name!r}")
    return cls(**kwargs)


def _block_to_dict(block: Any) -> dict[str, Any]:
    fields = dataclasses.fields(block)
    return {f.name: f.metadata["rule"].to_json(getattr(block, f.name)) for f in fields}


# --------------------------------------------------------------------------------------------
# The blocks.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EncodingConfig(_Block):
    """Multiresolution hash encoding of positions (Müller et al. 2022, §3).

    Attributes:
        otype: ``"HashGrid"`` (the only encoding).
        n_levels: L, number of levels (1..32).
        n_features_per_level: F, features per level (1, 2, 4 or 8).
        log2_hashmap_size: log2 of T, the table size per level ([10, 24]).
        base_resolution: N_min, resolution of the coarsest level (>= 2).
        per_level_scale: b, growth factor between levels (> 1), or null.
        max_resolution: N_max, resolution of the finest level, or null. At most one of
            ``per_level_scale`` and ``max_resolution`` may be set; see
            :meth:`resolved_per_level_scale`.
        backend: ``"auto"``, ``"torch"`` (reference), ``"triton"`` or ``"tcnn"``.
        table_dtype: storage of the hash tables, ``"float32"`` or ``"float16"`` (the encoding
            kernels and benchmarks only: training refuses float16, see ``Trainer``).
    """

    _PATH: ClassVar[str] = "encoding"

    otype: str = _field("HashGrid", _OneOf("HashGrid"))
    n_levels: int = _field(16, _Int(1, 32))
    n_features_per_level: int = _field(2, _OneOf(1, 2, 4, 8))
    log2_hashmap_size: int = _field(19, _Int(10, 24))
    base_resolution: int = _field(16, _Int(2))
    per_level_scale: float | None = _field(None, _Optional(_Float(1, lo_open=True)))
    max_resolution: int | None = _field(None, _Optional(_Int(2)))
    backend: str = _field("auto", _OneOf("auto", "torch", "triton", "tcnn"))
    table_dtype: str = _field("float32", _OneOf("float32", "float16"))

    def _check_relations(self) -> None:
        if self.per_level_scale is not None and self.max_resolution is not None:
            raise ConfigError(
                f"encoding.max_resolution: set either it or encoding.per_level_scale, not both "
                f"(got {self.max_resolution} and {self.per_level_scale})"
            )
        if self.max_resolution is not None and self.max_resolution <= self.base_resolution:
            raise ConfigError(
                f"encoding.max_resolution: expected an integer > encoding.base_resolution "
                f"({self.base_resolution}), got {self.max_resolution}"
            )

    def resolved_per_level_scale(self, aabb_scale: int) -> float:
        """The per-level scale b the hash grid uses for a scene of this ``aabb_scale``.

        ``per_level_scale`` if set; otherwise b = exp(ln(N_max / N_min) / (L − 1)) so that the
        finest level has resolution N_max (Müller et al. 2022, eq. 2–3), with N_max =
        ``max_resolution`` if set, else 2048 · aabb_scale (instant-ngp ``src/testbed.cu``,
        ``reset_network``). With a single level b is unused and 1.0 is returned.

        Args:
            aabb_scale: the scene's AABB scale, a power of two in 1..128.

        Returns:
            b as a Python float (> 1 when L > 1).
        """
        assert _is_int(aabb_scale) and aabb_scale >= 1, aabb_scale
        if self.per_level_scale is not None:
            return self.per_level_scale
        if self.n_levels == 1:
            return 1.0
        max_resolution = self.max_resolution or NGP_DESIRED_RESOLUTION * aabb_scale
        return math.exp(math.log(max_resolution / self.base_resolution) / (self.n_levels - 1))


@dataclasses.dataclass(frozen=True)
class NetworkConfig(_Block):
    """The density MLP (tiny-cuda-nn network layout; every otype means the same MLP here).

    Attributes:
        otype: ``"FullyFusedMLP"``, ``"CutlassMLP"`` or ``"MLP"``.
        activation: hidden activation, ``"ReLU"``.
        output_activation: ``"None"`` (the trainer applies trunc_exp / sigmoid itself).
        n_neurons: width, a multiple of 16 in [16, 256].
        n_hidden_layers: 1..8.
    """

    _PATH: ClassVar[str] = "network"

    otype: str = _field("FullyFusedMLP", _OneOf("FullyFusedMLP", "CutlassMLP", "MLP"))
    activation: str = _field("ReLU", _OneOf("ReLU"))
    output_activation: str = _field("None", _OneOf("None"))
    n_neurons: int = _field(64, _Int(16, 256, multiple_of=16))
    n_hidden_layers: int = _field(1, _Int(1, 8))


@dataclasses.dataclass(frozen=True)
class RGBNetworkConfig(NetworkConfig):
    """The colour MLP: the fields of :class:`NetworkConfig`, with 2 hidden layers by default."""

    _PATH: ClassVar[str] = "rgb_network"

    n_hidden_layers: int = _field(2, _Int(1, 8))


@dataclasses.dataclass(frozen=True)
class DirEncodingConfig(_Block):
    """Direction encoding: real spherical harmonics (:func:`trainer.encoding.sh.sh_encode`).

    Attributes:
        otype: ``"SphericalHarmonics"``, the only one.
        degree: bands, 1..4 (tiny-cuda-nn's ``degree``: degree² outputs). 4 is instant-ngp's choice;
            lower degrees give the colour less freedom to vary with the view direction (1: none).

    instant-ngp's ``Composite`` form is accepted on load (see the module docstring).
    """

    _PATH: ClassVar[str] = "dir_encoding"

    otype: str = _field("SphericalHarmonics", _OneOf("SphericalHarmonics"))
    degree: int = _field(4, _Int(1, 4))


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(_Block):
    """Adam with step-wise exponential decay and an optional EMA of the weights (flat form).

    tiny-cuda-nn's nested ``Ema → ExponentialDecay → Adam`` form is accepted on load.

    Attributes:
        learning_rate: Adam step size (> 0).
        beta1, beta2: Adam moment decays in [0, 1).
        epsilon: Adam denominator term (> 0).
        l2_reg: L2 regularisation of the MLP weights (>= 0; instant-ngp applies it to the MLPs
            only, not to the hash tables).
        decay_start, decay_interval, decay_base: from step ``decay_start`` on, the learning rate
            is multiplied by ``decay_base`` every ``decay_interval`` steps (tiny-cuda-nn
            ``ExponentialDecay``); ``decay_base`` 1.0 keeps it constant.
        ema_decay: decay of an exponential moving average of the weights in (0, 1), or null for
            none (tiny-cuda-nn ``Ema``): evaluation renders with the debiased average while training
            continues on the weights (:mod:`trainer.train.ema`).
        lazy_grid_updates: hash-grid entries whose gradient is exactly 0 in a step keep their
            value and Adam moments, as in tiny-cuda-nn's Adam (:mod:`trainer.train.grid_adam`);
            false moves every entry with its decaying momentum (dense :class:`torch.optim.Adam`).
    """

    _PATH: ClassVar[str] = "optimizer"

    learning_rate: float = _field(1e-2, _Float(0, lo_open=True))
    beta1: float = _field(0.9, _Float(0, 1, hi_open=True))
    beta2: float = _field(0.99, _Float(0, 1, hi_open=True))
    epsilon: float = _field(1e-15, _Float(0, lo_open=True))
    l2_reg: float = _field(1e-6, _Float(0))
    decay_start: int = _field(20000, _Int(0))
    decay_interval: int = _field(10000, _Int(1))
    decay_base: float = _field(0.33, _Float(0, 1, lo_open=True))
    ema_decay: float | None = _field(None, _Optional(_Float(0, 1, lo_open=True, hi_open=True)))
    lazy_grid_updates: bool = _field(False, _Bool())


@dataclasses.dataclass(frozen=True)
class LossConfig(_Block):
    """Photometric loss between rendered and reference colours.

    Attributes:
        otype: ``"Huber"``, ``"L2"``, ``"L1"`` or ``"RelativeL2"`` (tiny-cuda-nn loss names).
            L2 by default: on lego_400 it scores 0.3–0.4 dB above instant-ngp's Huber at equal
            steps (6000 and 8000 steps, ``bench/psnr_at_steps.py``, docs/benchmarks.md);
            configs/base.json keeps instant-ngp's Huber.
        huber_delta: δ of the Huber loss (> 0): 0.5·x² for |x| <= δ, δ·(|x| − δ/2) beyond.
            0.1 is instant-ngp's NeRF value (``include/neural-graphics-primitives/nerf_device.cuh``,
            ``loss_and_gradient``: ``huber_loss(target, prediction, 0.1f) / 5.0f``, which also
            divides by 5 so the loss reads roughly like L2).
    """

    _PATH: ClassVar[str] = "loss"

    otype: str = _field("L2", _OneOf("Huber", "L2", "L1", "RelativeL2"))
    huber_delta: float = _field(0.1, _Float(0, lo_open=True))


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_Block):
    """The training loop.

    Attributes:
        n_steps: optimiser steps (>= 1); 35k is instant-ngp's default.
        time_budget_s: stop after this many seconds of training (> 0), or null.
        seed: RNG seed in [0, 2^32 − 1].
        precision: ``"fp32"``, ``"tf32"``, ``"bf16"`` (autocast) or ``"fp16"`` (autocast +
            gradient scaling).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        target_samples_per_step: samples per step the adaptive ray batch aims at (>= 256; 2^18 in
            instant-ngp).
        initial_rays_per_step, max_rays_per_step: first and largest ray batch.
        log_every: steps between metric records (>= 1).
        eval_every: steps between test-view evaluations; 0 = only at the end.
        eval_max_images: evaluate at most this many test images, or null for all.
        eval_spp: renders averaged per test view, in [1, 64]: with more than one, every render
            marches with a random offset of the first sample along each ray (drawn from a generator
            seeded with ``seed``, so evaluations are repeatable and leave training's draws alone),
            as instant-ngp's ``scripts/run.py`` scores test views (8 renders at pixel centres); 1
            renders once without offsets. The subgrid mode always renders once.
        snapshot_every: steps between snapshots; 0 = none during training.
        background: colour behind straight-alpha pixels during training: ``"random"`` (per
            ray), ``"white"`` or ``"black"`` (evaluation of NeRF-synthetic uses white).
        occupancy_resolution: cells per axis of each occupancy-grid cascade, an even integer
            in [2, 1024] (so R³ fills whole bitfield bytes; instant-ngp: 128).
        occupancy_update_every: steps between occupancy-grid updates (>= 1).
        occupancy_warmup_steps: steps during which every cell is updated (>= 0).
        occupancy_decay: EMA decay of cell densities, in (0, 1).
        occupancy_threshold: density above which a cell is occupied (> 0; the trainer uses
            min(threshold, mean density)).
        max_march_steps: ray-marching steps per unit length across the unit cube (>= 1;
            instant-ngp's 1024 gives Δt = √3/1024).
        cone_angle: step growth with distance (>= 0), or null; see :meth:`resolved_cone_angle`.
        subpixel_jitter: training rays pass through a random point of their pixel rather than its
            centre (cameras with lens distortion always use pixel centres). Off by default:
            evaluation renders one ray through each pixel centre (the NeRF protocol), and training
            on pixel centres then scores 1.4 dB higher on lego_400 after 3000 steps (32.2 vs
            30.8 dB, ``bench/psnr_at_steps.py``, docs/benchmarks.md); instant-ngp jitters and
            renders test views with several jittered samples per pixel instead.
        prefetch_march: draw and march the next step's rays while the current step trains (a
            side CUDA stream; see :mod:`trainer.train.prefetch`); false marches inside the step.
        march_backend: ``"auto"`` (the Triton marcher on CUDA when Triton imports, else the
            PyTorch one), ``"triton"`` or ``"torch"``; see :func:`trainer.render.march.march_rays`.
        render_backend: the same choice for the training step's compositing
            (:mod:`trainer.render.triton_volrend`, twin :func:`trainer.render.volrend.composite`),
            kept-sample counts and compaction's per-slot copies (:mod:`trainer.render.triton_compact`).
        rays_backend: the same choice for building training rays and decoding their colours
            (:mod:`trainer.data.triton_rays`, one kernel for distortion-free cameras; twin: the
            sampler's PyTorch path, which distorted cameras always take).
        mlp_backend: the same choice for both MLPs of the field: one fused Triton launch
            forward and one backward (:mod:`trainer.model.triton_mlp`; float32 training and
            instant-ngp's MLP shapes, else the PyTorch path, its twin). On one H200 it lifted a
            whole 180 s lego_400 run from 144.4 to 151.3 steps/s (docs/benchmarks.md, "Time to PSNR").
        compact_samples: train on the samples in front of each ray's early stop only
            (instant-ngp's step, :mod:`trainer.render.compact`): a density pass without gradients
            over the marched samples finds where each ray's transmittance falls below 1e-4, those
            samples of whole rays fill a batch of about ``target_samples_per_step``, and rays per
            step are sized on the kept count. False trains on every marched sample and sizes rays
            on the marched count. The subgrid mode always trains on every marched sample (a box's
            segment cannot know the transmittance in front of it).
        quiet: no progress output on the console.
    """

    _PATH: ClassVar[str] = "training"

    n_steps: int = _field(35000, _Int(1))
    time_budget_s: float | None = _field(None, _Optional(_Float(0, lo_open=True)))
    seed: int = _field(1337, _Int(0, 2**32 - 1))
    precision: str = _field("fp32", _OneOf("fp32", "tf32", "bf16", "fp16"))
    device: str = _field("auto", _Device())
    target_samples_per_step: int = _field(262144, _Int(256))
    initial_rays_per_step: int = _field(4096, _Int(1))
    max_rays_per_step: int = _field(1048576, _Int(1))
    log_every: int = _field(100, _Int(1))
    eval_every: int = _field(0, _Int(0))
    eval_max_images: int | None = _field(None, _Optional(_Int(1)))
    eval_spp: int = _field(1, _Int(1, 64))
    snapshot_every: int = _field(0, _Int(0))
    background: str = _field("random", _OneOf("random", "white", "black"))
    occupancy_resolution: int = _field(128, _Int(2, 1024, multiple_of=2))
    occupancy_update_every: int = _field(16, _Int(1))
    occupancy_warmup_steps: int = _field(256, _Int(0))
    occupancy_decay: float = _field(0.95, _Float(0, 1, lo_open=True, hi_open=True))
    occupancy_threshold: float = _field(0.01, _Float(0, lo_open=True))
    max_march_steps: int = _field(1024, _Int(1))
    cone_angle: float | None = _field(None, _Optional(_Float(0)))
    subpixel_jitter: bool = _field(False, _Bool())
    prefetch_march: bool = _field(True, _Bool())
    march_backend: str = _field("auto", _OneOf("auto", "triton", "torch"))
    render_backend: str = _field("auto", _OneOf("auto", "triton", "torch"))
    rays_backend: str = _field("auto", _OneOf("auto", "triton", "torch"))
    mlp_backend: str = _field("auto", _OneOf("auto", "triton", "torch"))
    compact_samples: bool = _field(True, _Bool())
    quiet: bool = _field(False, _Bool())

    def _check_relations(self) -> None:
        if self.max_rays_per_step < self.initial_rays_per_step:
            raise ConfigError(
                f"training.max_rays_per_step: expected an integer >= "
                f"training.initial_rays_per_step ({self.initial_rays_per_step}), "
                f"got {self.max_rays_per_step}"
            )

    def resolved_cone_angle(self, aabb_scale: int) -> float:
        """The cone angle used for a scene of this ``aabb_scale``.

        ``cone_angle`` if set; otherwise 1/256 when aabb_scale > 1 (exponential stepping in large
        scenes) and 0 (constant steps, like the original NeRF) for the unit cube, as instant-ngp
        does (``src/testbed_nerf.cu``, ``cone_angle_constant``). The step at distance t is
        max(Δt_min, t · cone_angle).
        """
        assert _is_int(aabb_scale) and aabb_scale >= 1, aabb_scale
        if self.cone_angle is not None:
            return self.cone_angle
        return 1.0 / 256.0 if aabb_scale > 1 else 0.0


@dataclasses.dataclass(frozen=True)
class DataConfig(_Block):
    """The scene and how its pixels are held (DESIGN.md §1).

    Attributes:
        scene: path of the scene folder or file, or null (then the caller supplies one).
        downscale: integer image shrink factor (>= 1).
        holdout_every: every n-th frame goes to ``test`` for formats without splits; 0 = none.
        aabb_scale: override of the scene's aabb_scale (power of two 1..128), or null.
        placement: ``"auto"``, ``"device"``, ``"pinned"`` or ``"stream"``.
        memory_budget_gib: memory the pixel table may use when choosing ``auto`` placement
            (GiB, > 0), or null for the device's free memory.
        cache_dir: folder of the decoded-image cache, or null for no cache.
        decode_threads: image decoding threads (>= 1), or null for the CPU count.
    """

    _PATH: ClassVar[str] = "data"

    scene: str | None = _field(None, _Optional(_Str()))
    downscale: int = _field(1, _Int(1))
    holdout_every: int = _field(8, _Int(0))
    aabb_scale: int | None = _field(None, _Optional(_Int(1, 128, power_of_two=True)))
    placement: str = _field("auto", _OneOf("auto", "device", "pinned", "stream"))
    memory_budget_gib: float | None = _field(None, _Optional(_Float(0, lo_open=True)))
    cache_dir: str | None = _field(None, _Optional(_Str()))
    decode_threads: int | None = _field(None, _Optional(_Int(1)))


@dataclasses.dataclass(frozen=True)
class ParallelConfig(_Block):
    """How training is spread over ranks (DESIGN.md §3).

    Attributes:
        mode: ``"data"`` (every rank holds the whole model) or ``"subgrid"`` (the scene box is
            cut into ``num_subgrids`` boxes, each with its own field, composited exactly).
        num_subgrids: K boxes (>= 1; >= world size in subgrid mode).
        overlap: fraction of a box's size its encoding domain is enlarged by, in [0, 0.5].
        bucket_mib: gradient all-reduce bucket size (MiB, > 0).
        compression: gradient compression, ``"none"``, ``"fp16"`` or ``"bf16"``.
        overlap_comm: launch each gradient bucket's all-reduce from a hook during backward.
            Off by default: the hash-grid table, by far the largest gradient, is produced last
            (the encoding is the first layer), so there is little to overlap, and the per-parameter
            hooks add host work to a step that is host-bound on an H200 (measured on 2×H200,
            lego_400: 31.2 M samples/s with overlap, 35.4 M without; docs/benchmarks.md).
        balance_every: steps between load-balancing moves; 0 = static shares.
    """

    _PATH: ClassVar[str] = "parallel"

    mode: str = _field("data", _OneOf("data", "subgrid"))
    num_subgrids: int = _field(1, _Int(1))
    overlap: float = _field(0.0, _Float(0, 0.5))
    bucket_mib: float = _field(25.0, _Float(0, lo_open=True))
    compression: str = _field("none", _OneOf("none", "fp16", "bf16"))
    overlap_comm: bool = _field(False, _Bool())
    balance_every: int = _field(0, _Int(0))


@dataclasses.dataclass(frozen=True)
class GpuCapability(_Block):
    """Relative compute power of one rank's GPU; sets the initial static load shares.

    Attributes:
        rank: the rank (>= 0, unique in the list).
        compute_power: relative speed (> 0); shares are proportional to it.
        type: a free-form name of the GPU (for reports), may be empty.
    """

    _PATH: ClassVar[str] = "distributed.gpu_capabilities[]"

    rank: int = _field(_REQUIRED, _Int(0))
    compute_power: float = _field(_REQUIRED, _Float(0, lo_open=True))
    type: str = _field("", _Str(allow_empty=True))


MAX_TIMEOUT_S = 2_000_000  # gloo/NCCL keep timeouts in int32 milliseconds (2^31 ms ≈ 2.1e6 s)


@dataclasses.dataclass(frozen=True)
class DistributedConfig(_Block):
    """Process-group settings used when the launcher does not provide them (DESIGN.md §3).

    Attributes:
        world_size: number of ranks (>= 1), or null to take it from the launcher / GPU count.
        master_addr: rendezvous host.
        master_port: rendezvous port in [0, 65535]; 0 picks a free port automatically.
        backend: ``"auto"`` (NCCL on CUDA, gloo on CPU), ``"nccl"`` or ``"gloo"``.
        timeout_s: collective timeout (s, > 0, at most 2e6 ≈ 23 days: gloo and NCCL hold it in
            milliseconds in a 32-bit int); no rank may hang longer.
        gpu_capabilities: per-rank :class:`GpuCapability` entries (ranks unique and, when
            ``world_size`` is set, below it).
        emulate_interconnect: ``"none"``, or make NCCL on one NVLink host behave like another
            link (DESIGN.md §5, ANCHORS.md): ``"nvlink"`` (no change, labelled), ``"pcie"``
            (``NCCL_P2P_DISABLE=1``, ~26 GB/s) or ``"sockets"`` (also ``NCCL_SHM_DISABLE=1``,
            ~3.6 GB/s). NCCL only: a gloo run rejects any value but ``"none"``.
    """

    _PATH: ClassVar[str] = "distributed"

    world_size: int | None = _field(None, _Optional(_Int(1)))
    master_addr: str = _field("127.0.0.1", _Str())
    master_port: int = _field(0, _Int(0, 65535))
    backend: str = _field("auto", _OneOf("auto", "nccl", "gloo"))
    timeout_s: float = _field(300.0, _Float(0, MAX_TIMEOUT_S, lo_open=True))
    gpu_capabilities: tuple[GpuCapability, ...] = _field((), _Entries(GpuCapability))
    emulate_interconnect: str = _field("none", _OneOf("none", "nvlink", "pcie", "sockets"))

    def _check_relations(self) -> None:
        first_index: dict[int, int] = {}
        for i, entry in enumerate(self.gpu_capabilities):
            key = f"distributed.gpu_capabilities[{i}].rank"
            if entry.rank in first_index:
                raise ConfigError(
                    f"{key}: duplicate rank {entry.rank} "
                    f"(also in distributed.gpu_capabilities[{first_index[entry.rank]}])"
                )
            first_index[entry.rank] = i
            if self.world_size is not None and entry.rank >= self.world_size:
                raise ConfigError(
                    f"{key}: expected a rank < distributed.world_size ({self.world_size}), "
                    f"got {entry.rank}"
                )


@dataclasses.dataclass(frozen=True)
class ProfileConfig(_Block):
    """Instrumentation of a training run (DESIGN.md §4); all of it is off the hot path by default.

    Attributes:
        trace_steps: ``"A:B"``: ``torch.profiler`` records steps A..B-1 (CPU and CUDA
            activities) and each rank writes a Chrome trace to ``RunDir.trace_path(rank)``;
            null for none.
        phase_timers: time the step's phases (CUDA events + NVTX ranges); off only to measure
            their overhead.
        cuda_profiler_range: call cudaProfilerStart/Stop around the trace window (steps 10:20
            when ``trace_steps`` is null), for ``nsys profile --capture-range=cudaProfilerApi``.
    """

    _PATH: ClassVar[str] = "profile"

    trace_steps: str | None = _field(None, _Optional(_StepWindow()))
    phase_timers: bool = _field(True, _Bool())
    cuda_profiler_range: bool = _field(False, _Bool())

    def window(self) -> tuple[int, int] | None:
        """The steps ``(A, B)`` of the trace / profiler-range window, or None."""
        if self.trace_steps is not None:
            return parse_step_window(self.trace_steps)
        return (10, 20) if self.cuda_profiler_range else None


@dataclasses.dataclass(frozen=True)
class FaultsConfig(_Block):
    """Deliberate faults, for tests, demonstrations of the profiler's diagnoses and the sweep's
    outcome handling. All off by default.

    Attributes:
        ranks: ranks the faults apply to; empty = every rank.
        data_delay_ms: sleep this long inside the "data" phase of every step (a slow data path).
        compute_slowdown: the step's compute takes this many times longer (>= 1): after the
            backward pass the rank sleeps (factor − 1) × the step's compute time so far.
        oom_at_step: at this step raise ``torch.OutOfMemoryError`` (a simulated CUDA OOM).
        crash_at_step: at this step raise ``RuntimeError`` (a crash).
        hang_at_step: at this step sleep forever (a hang, for timeouts).
    """

    _PATH: ClassVar[str] = "faults"

    ranks: tuple[int, ...] = _field((), _IntList(0))
    data_delay_ms: float = _field(0.0, _Float(0))
    compute_slowdown: float = _field(1.0, _Float(1))
    oom_at_step: int | None = _field(None, _Optional(_Int(0)))
    crash_at_step: int | None = _field(None, _Optional(_Int(0)))
    hang_at_step: int | None = _field(None, _Optional(_Int(0)))

    def applies_to(self, rank: int) -> bool:
        return not self.ranks or rank in self.ranks

    def check_ranks(self, world_size: int) -> None:
        """Raises ConfigError (naming ``faults.ranks``) when an entry is not a rank of ``world_size``."""
        if any(r >= world_size for r in self.ranks):
            raise ConfigError(f"faults.ranks: expected ranks < world size ({world_size}), got {list(self.ranks)}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The whole trainer config: one typed block per concern (see the module docstring).

    Build it with :func:`load_config` or :func:`config_from_dict`; ``TrainConfig()`` holds the
    defaults. Blocks are replaced, not mutated: ``dataclasses.replace(cfg, training=...)`` or
    :func:`apply_overrides`.

    Raises:
        ConfigError: for settings that contradict each other across blocks
            (``parallel.num_subgrids`` below ``distributed.world_size`` in subgrid mode).
    """

    encoding: EncodingConfig = dataclasses.field(default_factory=EncodingConfig)
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    rgb_network: RGBNetworkConfig = dataclasses.field(default_factory=RGBNetworkConfig)
    dir_encoding: DirEncodingConfig = dataclasses.field(default_factory=DirEncodingConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    parallel: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
    profile: ProfileConfig = dataclasses.field(default_factory=ProfileConfig)
    faults: FaultsConfig = dataclasses.field(default_factory=FaultsConfig)

    def __post_init__(self) -> None:
        for name, cls in BLOCKS.items():
            assert type(getattr(self, name)) is cls, f"TrainConfig.{name} must be a {cls.__name__}"
        world_size = self.distributed.world_size
        if (
            self.parallel.mode == "subgrid"
            and world_size is not None
            and self.parallel.num_subgrids < world_size
        ):
            raise ConfigError(
                f"parallel.num_subgrids: expected an integer >= distributed.world_size "
                f"({world_size}) in subgrid mode, got {self.parallel.num_subgrids}"
            )


BLOCKS: dict[str, type] = {
    "encoding": EncodingConfig,
    "network": NetworkConfig,
    "rgb_network": RGBNetworkConfig,
    "dir_encoding": DirEncodingConfig,
    "optimizer": OptimizerConfig,
    "loss": LossConfig,
    "training": TrainingConfig,
    "data": DataConfig,
    "parallel": ParallelConfig,
    "distributed": DistributedConfig,
    "profile": ProfileConfig,
    "faults": FaultsConfig,
}
"""Block name → block class, in the order of :class:`TrainConfig`'s fields."""


# --------------------------------------------------------------------------------------------
# Reading instant-ngp / tiny-cuda-nn forms.
# --------------------------------------------------------------------------------------------

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


def _optimizer_from_dict(value: object, path: str) -> OptimizerConfig:
    """Read the flat form, or tiny-cuda-nn's nested ``Ema → ExponentialDecay → Adam`` form."""
    data = _expect_object(path, value)
    if "otype" not in data:
        return _block_from_dict(OptimizerConfig, data, path)
    flat: dict[str, Any] = {}
    levels = list(_OPTIMIZER_LEVELS)  # the levels still allowed at this depth
    visited: list[str] = []
    node, node_path = data, path
    while True:
        otype = node.get("otype")
        if otype not in levels:
            raise ConfigError(
                f"{node_path}.otype: expected one of {', '.join(levels)}, got {_show(otype)}"
            )
        visited.append(otype)
        names = _OPTIMIZER_LEVELS[otype]
        wraps = otype != "Adam"
        for key, item in node.items():
            if key == "otype" or (wraps and key == "nested"):
                continue
            if key not in names:
                allowed = ["otype", *names, *(["nested"] if wraps else [])]
                raise _unknown_key(node_path, key, allowed)
            flat[names[key]] = _rule_of(OptimizerConfig, names[key]).from_json(
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
        node = _expect_object(node_path, node["nested"])
    if "ExponentialDecay" not in visited:  # tiny-cuda-nn then keeps the learning rate constant
        flat["decay_base"] = 1.0
    return OptimizerConfig(**flat)


# Entries of instant-ngp's Composite direction encoding that encode its optional per-ray extra
# dimensions (none in this trainer), ignored.
_IGNORED_DIR_ENCODINGS = ("Identity", "OneBlob")


def _dir_encoding_from_dict(value: object, path: str) -> DirEncodingConfig:
    """Read ``{"otype": "SphericalHarmonics", ...}`` or instant-ngp's ``Composite`` form."""
    data = _expect_object(path, value)
    otype = data.get("otype", "SphericalHarmonics")
    if otype == "SphericalHarmonics":
        return _block_from_dict(DirEncodingConfig, data, path)
    if otype != "Composite":
        raise ConfigError(
            f"{path}.otype: expected one of SphericalHarmonics, Composite, got {_show(otype)}"
        )
    for key in data:
        if key not in ("otype", "nested"):
            raise _unknown_key(path, key, ["otype", "nested"])
    nested = data.get("nested")
    if not isinstance(nested, list) or not nested:
        raise ConfigError(f"{path}.nested: expected a non-empty list, got {_show(nested)}")
    for i, entry in enumerate(nested[1:], start=1):
        entry_otype = _expect_object(f"{path}.nested[{i}]", entry).get("otype")
        if entry_otype not in _IGNORED_DIR_ENCODINGS:
            raise ConfigError(
                f"{path}.nested[{i}].otype: expected one of {', '.join(_IGNORED_DIR_ENCODINGS)} "
                f"after the SphericalHarmonics entry, got {_show(entry_otype)}"
            )
    sh_path = f"{path}.nested[0]"
    sh = dict(_expect_object(sh_path, nested[0]))
    if sh.get("otype") != "SphericalHarmonics":
        raise ConfigError(
            f"{sh_path}.otype: expected SphericalHarmonics (it encodes the ray direction), "
            f"got {_show(sh.get('otype'))}"
        )
    n_dims = sh.pop("n_dims_to_encode", 3)
    if not (_is_int(n_dims) and n_dims == 3):
        raise ConfigError(f"{sh_path}.n_dims_to_encode: expected 3, got {_show(n_dims)}")
    return _block_from_dict(DirEncodingConfig, sh, sh_path)


def _block_reader(name: str):
    if name == "optimizer":
        return _optimizer_from_dict
    if name == "dir_encoding":
        return _dir_encoding_from_dict
    return lambda value, path: _block_from_dict(BLOCKS[name], value, path)


# --------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------


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
        data = _expect_object("top level", d)
        blocks = {}
        for name, value in data.items():
            if name in IGNORED_NGP_BLOCKS:
                _expect_object(name, value)
                continue
            if name not in BLOCKS:
                raise _unknown_key("", name, list(BLOCKS))
            blocks[name] = _block_reader(name)(value, name)
        return TrainConfig(**blocks)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def config_to_dict(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """The config as plain JSON-serialisable data, every key present, optimizer in flat form.

    ``config_from_dict(config_to_dict(cfg)) == cfg`` holds for every config.
    """
    return {name: _block_to_dict(getattr(cfg, name)) for name in BLOCKS}


def dump_config(cfg: TrainConfig) -> str:
    """The config as pretty-printed JSON (2-space indent), e.g. for ``--print-config``.

    The text is plain JSON, so :func:`load_config` (JSON5) and ``json.loads`` both read it back.
    """
    return json.dumps(config_to_dict(cfg), indent=2, allow_nan=False)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _parse_json5(text: str, source: str) -> object:
    """Parse JSON5 text; a syntax error names ``source`` with its line and column."""
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


def load_config(path: str | Path | None) -> TrainConfig:
    """Read a trainer config file (JSON5: JSON with comments and trailing commas).

    Args:
        path: the config file, or None for the defaults.

    Returns:
        The validated config. Paths inside it (``data.scene``, ``data.cache_dir``) are kept as
        written (relative paths are relative to the working directory, not to the file).

    Raises:
        ConfigError: if the file is missing or unreadable (naming the path), has a syntax error
            (``"<path>:<line>:<column>: invalid JSON5: ..."``) or holds a bad key or value
            (see :func:`config_from_dict`).
    """
    if path is None:
        return TrainConfig()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: config file is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file ({exc.strerror or exc})") from None
    return config_from_dict(_parse_json5(text, str(p)), source=str(p))


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
            'training.n_steps'?)"`` or ``"overrides: <dotted key>: expected ..., got ..."``.
    """
    data = config_to_dict(cfg)
    for dotted, value in overrides.items():
        block, _, name = str(dotted).partition(".")
        if block not in data or name not in data[block]:
            raise ConfigError(f"overrides: {_unknown_key('', dotted, _dotted_keys())}")
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


# Keys that say how long or how visibly a run goes, not what it trains: they may change on resume.
RUN_CONTROL_KEYS = frozenset({
    "training.n_steps", "training.time_budget_s", "training.eval_every", "training.eval_max_images",
    "training.eval_spp", "training.log_every", "training.snapshot_every", "training.quiet", "training.device",
    "profile", "faults", "distributed", "parallel.balance_every",
    "data.scene",  # a path, spelled relative to where each run started; a scene change shows in the shapes
})


def config_differences(saved: Mapping[str, Any], current: TrainConfig) -> list[str]:
    """The training settings in which ``current`` differs from ``saved`` (``config_to_dict`` of the
    config a snapshot or checkpoint was written with), as ``"key: saved → current"`` lines; keys
    of :data:`RUN_CONTROL_KEYS` (and the blocks named there) are left out.

    Args:
        saved: ``{block: {key: value}}`` as stored in a snapshot/checkpoint; unknown blocks or keys
            are skipped (written by another version).
        current: the config of the run that resumes.
    """
    import json

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
            if theirs[key] != value:
                lines.append(f"{dotted}: {theirs[key]!r} → {value!r}")
    return lines

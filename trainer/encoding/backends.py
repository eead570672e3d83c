"""One interface over the hash-grid backends (DESIGN.md §2), and the encoding module that uses it.

Backends:

* ``"torch"`` — PyTorch, always available, every device, tables in float16 / bfloat16 / float32 /
  float64: :func:`~trainer.encoding.corner_hashgrid.hash_grid_encode_corners` on a CPU (its fast
  path; float64 excepted), :func:`~trainer.encoding.hashgrid.hash_grid_encode_reference` elsewhere.
* ``"triton"`` — a fused GPU kernel, registered by :mod:`trainer.encoding.triton_hashgrid` when
  that module exists and imports (it must call :func:`register_backend` at import time). Looked
  up lazily, so this module works without Triton installed.
* ``"tcnn"`` — tiny-cuda-nn's ``HashGrid`` through its PyTorch bindings (``import tinycudann``),
  CUDA only. tiny-cuda-nn owns its parameters (one flat ``params`` vector in its own layout and
  its own vertex/position conventions: ``pos = x·scale + 0.5`` with ``scale = N_min·b^l − 1``), so
  its features are *not* numerically equal to the reference's for the same config; it is a
  drop-in for training, not a bit-twin. Such "parameter-owning" backends set
  ``owns_parameters = True`` and build an ``nn.Module`` via :meth:`HashGridBackend.build_module`;
  :class:`HashGridEncoding` then holds that module instead of its own ``table``.
* ``"auto"`` — ``triton`` on CUDA when it is available and supports the table dtype, else
  ``torch``.
"""

from __future__ import annotations

import abc
import importlib
import importlib.util
from typing import ClassVar

import torch
from torch import nn

from trainer.encoding.corner_hashgrid import corners_apply, hash_grid_encode_corners
from trainer.encoding.hashgrid import (
    HashGridConfig,
    hash_grid_encode_reference,
    level_offsets,
)
from trainer.contract.errors import ConfigError

__all__ = [
    "BACKEND_NAMES",
    "HashGridBackend",
    "HashGridEncoding",
    "TcnnBackend",
    "TorchBackend",
    "get_backend",
    "register_backend",
    "registered_backends",
    "tcnn_encoding_config",
]

BACKEND_NAMES = ("auto", "torch", "triton", "tcnn")
_TRITON_MODULE = "trainer.encoding.triton_hashgrid"


class HashGridBackend(abc.ABC):
    """Contract of a hash-grid backend.

    A backend is stateless; the parameters live in :class:`HashGridEncoding`. Table backends
    (``owns_parameters = False``) implement :meth:`encode` on a table laid out as in
    :mod:`trainer.encoding.hashgrid` and must match the reference within float tolerance.
    Parameter-owning backends (``owns_parameters = True``, e.g. tiny-cuda-nn) implement
    :meth:`build_module` instead.
    """

    name: ClassVar[str]
    owns_parameters: ClassVar[bool] = False

    @abc.abstractmethod
    def is_available(self) -> bool:
        """Whether the backend's libraries import in this process (never raises)."""

    @abc.abstractmethod
    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether the backend runs on ``device`` with a table stored in ``dtype`` (never raises)."""

    def encode(self, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> torch.Tensor:
        """Encode ``x`` [n, 3] in [0, 1] with ``table`` [total_entries, F] → [n, L·F].

        Autograd-aware with respect to ``table``. Output float32 (float64 for float64 inputs).
        Table backends override this; parameter-owning backends have no external table.
        """
        raise TypeError(f"hash-grid backend {self.name!r} owns its parameters; use build_module()")

    def encode_counted(self, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig,
                       count: torch.Tensor) -> torch.Tensor:
        """:meth:`encode` without autograd where only the first ``count`` rows of ``x`` are wanted
        (``count``: a [] integer tensor on the device, never read on the host). Rows past it may
        be left uninitialised; this default encodes every row."""
        with torch.no_grad():
            return self.encode(x, table, cfg)

    def build_module(
        self, cfg: HashGridConfig, table_dtype: torch.dtype, device: torch.device
    ) -> nn.Module:
        """Build an ``nn.Module`` mapping [n, 3] in [0, 1] → [n, L·F] that owns its parameters.

        Only for ``owns_parameters = True`` backends.
        """
        raise TypeError(f"hash-grid backend {self.name!r} encodes an external table; use encode()")


class TorchBackend(HashGridBackend):
    """PyTorch: :func:`hash_grid_encode_corners` where it applies (CPU tensors, no float64), else
    the readable reference :func:`hash_grid_encode_reference` (its slow twin)."""

    name = "torch"
    _DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

    def is_available(self) -> bool:
        return True

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        return dtype in self._DTYPES

    def encode(self, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> torch.Tensor:
        if corners_apply(x, table):
            return hash_grid_encode_corners(x, table, cfg)
        return hash_grid_encode_reference(x, table, cfg)


def tcnn_encoding_config(cfg: HashGridConfig) -> dict[str, object]:
    """tiny-cuda-nn ``encoding_config`` for ``cfg`` (DOCUMENTATION.md, "HashGrid")."""
    return {
        "otype": "HashGrid",
        "n_levels": cfg.n_levels,
        "n_features_per_level": cfg.n_features_per_level,
        "log2_hashmap_size": cfg.log2_hashmap_size,
        "base_resolution": cfg.base_resolution,
        "per_level_scale": cfg.growth_factor,
        "interpolation": "Linear",
    }


class TcnnBackend(HashGridBackend):
    """tiny-cuda-nn's fused hash grid; owns its parameters (see the module docstring)."""

    name = "tcnn"
    owns_parameters = True
    _DTYPES = (torch.float16, torch.float32)

    def __init__(self) -> None:
        self._importable: bool | None = None

    def is_available(self) -> bool:
        if self._importable is None:
            try:
                importlib.import_module("tinycudann")
            except Exception:  # ImportError, or OSError/RuntimeError from missing CUDA libraries
                self._importable = False
            else:
                self._importable = True
        return self._importable

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        return torch.device(device).type == "cuda" and dtype in self._DTYPES and self.is_available()

    def build_module(
        self, cfg: HashGridConfig, table_dtype: torch.dtype, device: torch.device
    ) -> nn.Module:
        """A ``tinycudann.Encoding`` on ``device``; ``table_dtype`` is its parameter precision.

        Its ``params`` are initialised by tiny-cuda-nn (U(−1e-4, 1e-4) for grids); output may be
        float16 — :class:`HashGridEncoding` casts it to float32.
        """
        import tinycudann

        with torch.cuda.device(torch.device(device)):
            return tinycudann.Encoding(
                n_input_dims=3, encoding_config=tcnn_encoding_config(cfg), dtype=table_dtype
            )


_REGISTRY: dict[str, HashGridBackend] = {"torch": TorchBackend(), "tcnn": TcnnBackend()}
_triton_lookup_done = False


def register_backend(backend: HashGridBackend) -> None:
    """Make ``backend`` selectable by its ``name`` (replaces an earlier one of that name)."""
    assert backend.name in BACKEND_NAMES and backend.name != "auto", backend.name
    _REGISTRY[backend.name] = backend


def registered_backends() -> list[str]:
    """Names of the backends registered so far (after trying to load the Triton module)."""
    _load_triton_module()
    return sorted(_REGISTRY)


def _load_triton_module() -> None:
    """Import :mod:`trainer.encoding.triton_hashgrid` once, if it exists; it registers itself."""
    global _triton_lookup_done
    if _triton_lookup_done or "triton" in _REGISTRY:
        return
    _triton_lookup_done = True
    if importlib.util.find_spec(_TRITON_MODULE) is None:
        return
    try:
        importlib.import_module(_TRITON_MODULE)
    except ImportError:  # Triton itself not installed: the backend is simply absent
        pass


def get_backend(
    name: str,
    device: torch.device | str | None = None,
    table_dtype: torch.dtype = torch.float32,
) -> HashGridBackend:
    """Pick the hash-grid backend for ``device`` and a table of ``table_dtype``.

    Args:
        name: ``"auto"``, ``"torch"``, ``"triton"`` or ``"tcnn"``.
        device: where the table lives (default CPU).
        table_dtype: dtype the table is stored in.

    Returns:
        The backend. ``"auto"`` gives ``triton`` on CUDA where available, else ``torch``.

    Raises:
        ConfigError: naming ``encoding.backend`` for an unknown name, or a named backend that is
            not available or does not support this device / dtype.
    """
    if name not in BACKEND_NAMES:
        raise ConfigError(
            f"encoding.backend: expected one of {', '.join(BACKEND_NAMES)}, got {name!r}"
        )
    device = torch.device("cpu" if device is None else device)
    if name == "triton" or (name == "auto" and device.type == "cuda"):
        _load_triton_module()  # only where it may be chosen: importing Triton takes a second
    if name == "auto":
        triton = _REGISTRY.get("triton")
        if (
            device.type == "cuda"
            and triton is not None
            and triton.is_available()
            and triton.supports(device, table_dtype)
        ):
            return triton
        name = "torch"
    backend = _REGISTRY.get(name)
    if backend is None or not backend.is_available():
        raise ConfigError(f"encoding.backend: {name!r} is not available in this installation")
    if not backend.supports(device, table_dtype):
        raise ConfigError(
            f"encoding.backend: {name!r} does not support a {table_dtype} table on {device}"
        )
    return backend


class HashGridEncoding(nn.Module):
    """Multiresolution hash encoding as an ``nn.Module`` (paper §3), on the chosen backend.

    Args:
        cfg: the grid layout.
        backend: ``"auto"``, ``"torch"``, ``"triton"`` or ``"tcnn"`` (see :func:`get_backend`).
        table_dtype: storage dtype of the table (float16 halves its memory; the reference reads
            it in float32).
        device: where the table lives (default CPU).

    Parameters:
        table: [total_entries, F] ``table_dtype``, initialised U(−1e-4, 1e-4) (paper §4);
            ``None`` for a parameter-owning backend (tcnn), whose module is ``backend_module``.

    Raises:
        ConfigError: naming ``encoding.backend`` (see :func:`get_backend`).
    """

    def __init__(
        self,
        cfg: HashGridConfig,
        backend: str = "auto",
        table_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        device = torch.device("cpu" if device is None else device)
        self.cfg = cfg
        self.backend = get_backend(backend, device, table_dtype)
        if self.backend.owns_parameters:
            self.register_parameter("table", None)
            self.backend_module: nn.Module | None = self.backend.build_module(
                cfg, table_dtype, device
            )
        else:
            self.backend_module = None
            table = torch.empty(
                level_offsets(cfg)[-1], cfg.n_features_per_level, dtype=torch.float32, device=device
            ).uniform_(-1e-4, 1e-4)
            self.table = nn.Parameter(table.to(table_dtype))

    @property
    def backend_name(self) -> str:
        """Name of the backend in use (``"torch"``, ``"triton"`` or ``"tcnn"``)."""
        return self.backend.name

    @property
    def output_dim(self) -> int:
        """L · F."""
        return self.cfg.output_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode positions.

        Args:
            x: [n, 3] float, positions in the unit cube (clamped into [0, 1]).

        Returns:
            [n, L·F] float32 features, level-major (float64 when ``x`` or the table is float64
            on the reference backend, for gradcheck).
        """
        if self.backend_module is not None:
            features = self.backend_module(x.float().contiguous())
        else:
            features = self.backend.encode(x, self.table, self.cfg)
        return features if features.dtype == torch.float64 else features.float()

    def encode_counted(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """Features of the first ``count`` positions, without autograd (what a density pass over
        a fixed-capacity buffer needs).

        Args:
            x: [n, 3] float, positions in the unit cube.
            count: [] integer tensor on ``x``'s device (never read on the host): the live rows.

        Returns:
            [n, L·F] float32 features; rows from ``count`` on may be uninitialised (the Triton
            backend skips them; the others encode every row).
        """
        if self.backend_module is not None:
            with torch.no_grad():
                return self.forward(x)
        features = self.backend.encode_counted(x, self.table, self.cfg, count)
        return features if features.dtype == torch.float64 else features.float()

    def extra_repr(self) -> str:
        return f"backend={self.backend_name}, {self.cfg}"

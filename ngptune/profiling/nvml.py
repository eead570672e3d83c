"""GPU telemetry from NVML (``nvidia-ml-py``, imported as ``pynvml``): one row per GPU and sample.

Rows have the columns of :data:`ngptune.profiling.tables.GPU_TIMELINE_TABLE` (units in the names):

=====================  =======================================================================
t_s                    seconds since the reader opened (``time.monotonic``; the wall clock of that
                       moment is :attr:`GpuReader.origin_unix_s`). ``ngptune profile`` shifts it to
                       seconds since the training loop started
                       (:func:`ngptune.profiling.collect.align_gpu_timeline`)
gpu                    NVML device index
util_pct, mem_util_pct ``nvmlDeviceGetUtilizationRates``: kernel-busy and memory-busy share of
                       the driver's last sample period, %
mem_used_mib           ``nvmlDeviceGetMemoryInfo().used`` / 2^20
power_w                ``nvmlDeviceGetPowerUsage`` (mW) / 1000
temp_c                 ``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``
sm_clock_mhz,          ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM / NVML_CLOCK_MEM)``
mem_clock_mhz
throttle_reasons       ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask decoded to names joined
                       by ``|`` (:func:`decode_throttle_reasons`), ``none`` when no bit is set
pcie_tx/rx_kib_per_s   ``nvmlDeviceGetPcieThroughput`` (KiB/s over the driver's 20 ms window)
nvlink_tx/rx_kib_per_s NVLink data counters (``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX``, KiB,
                       summed over links with scopeId UINT_MAX) differenced between two samples
=====================  =======================================================================

A query that fails (``NVMLError``: not supported on this GPU, permission, ...) leaves its value
empty (None) and the others are still read. Without NVML (no driver, no GPU) :class:`GpuReader`
raises :class:`NvmlUnavailable`; :class:`NvmlSampler` records that as a missing source.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from types import ModuleType
from typing import Any, Callable, Sequence

import pandas as pd

from ngptune.errors import NgptuneError
from ngptune.profiling import SourceStatus
from ngptune.profiling.tables import GPU_TIMELINE_TABLE
from trainer.contract import ConfigError

UINT_MAX = 0xFFFFFFFF  # scopeId that sums an NVLink counter over all links (nvml.h)

# Clock-event reason bits (nvml.h ``nvmlClocksEventReason*``) and the names written for them.
THROTTLE_REASONS: tuple[tuple[str, str], ...] = (
    ("GpuIdle", "gpu_idle"),
    ("ApplicationsClocksSetting", "applications_clocks"),
    ("SwPowerCap", "sw_power_cap"),
    ("HwSlowdown", "hw_slowdown"),
    ("SyncBoost", "sync_boost"),
    ("SwThermalSlowdown", "sw_thermal_slowdown"),
    ("HwThermalSlowdown", "hw_thermal_slowdown"),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("DisplayClockSetting", "display_clocks"),
)


class NvmlUnavailable(NgptuneError):
    """NVML cannot be used here (no library, no driver, no GPU); ``reason`` is NVML's own words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"no NVIDIA GPU found (NVML: {reason})")


def import_nvml() -> ModuleType:
    """The ``pynvml`` module of nvidia-ml-py.

    Raises:
        NvmlUnavailable: nvidia-ml-py is not installed.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    return pynvml


def _reason_bit(nvml: Any, suffix: str) -> int | None:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nvml, prefix + suffix, None)
        if value is not None:
            return int(value)
    return None


def decode_throttle_reasons(mask: int, nvml: Any) -> str:
    """Names of the clock-event reason bits set in ``mask``, joined by ``|``.

    Bit values are read from ``nvml`` (``nvmlClocksEventReason*``); unknown bits are written as
    hex. ``0`` gives ``"none"``.
    """
    mask = int(mask)
    if mask == 0:
        return "none"
    names, known = [], 0
    for suffix, name in THROTTLE_REASONS:
        bit = _reason_bit(nvml, suffix)
        if bit and mask & bit:
            names.append(name)
            known |= bit
    if mask & ~known:
        names.append(f"0x{mask & ~known:x}")
    return "|".join(names)


def _query(nvml: Any, call: Callable[[], Any]) -> Any:
    """``call()``, or None when NVML reports an error for this query."""
    try:
        return call()
    except nvml.NVMLError:
        return None


@dataclasses.dataclass
class _Counter:
    t_s: float
    tx_kib: float
    rx_kib: float


class GpuReader:
    """Open NVML and read one row per selected GPU on demand.

    Args:
        gpus: NVML indices to read, or None for all.
        nvml: the NVML module (``pynvml``); another object with the same functions and
            constants may be given (tests).

    Attributes:
        origin_unix_s: wall clock (``time.time()``, s) when the reader opened: the moment of
            ``t_s = 0`` of its rows.

    Raises:
        NvmlUnavailable: NVML cannot be initialised or sees no GPU.
        ConfigError: a requested index is not a GPU NVML sees (``--gpus``).
    """

    def __init__(self, gpus: Sequence[int] | None = None, nvml: Any | None = None) -> None:
        self.nvml = nvml if nvml is not None else import_nvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc) or type(exc).__name__) from None
        self._open = True
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
            if count == 0:
                raise NvmlUnavailable("the driver reports 0 GPUs")
            selected = list(range(count)) if gpus is None else list(gpus)
            for index in selected:
                if not 0 <= index < count:
                    raise ConfigError(f"--gpus: GPU {index} not found (NVML sees {count} GPU(s): 0..{count - 1})")
            self.gpus = selected
            self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in selected}
        except self.nvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(str(exc) or type(exc).__name__) from None
        except BaseException:
            self.close()
            raise
        self._t0 = time.monotonic()
        self.origin_unix_s = time.time()
        self._nvlink: dict[int, _Counter] = {}
        self._nvlink_scopes: dict[int, list[int] | None] = {}

    def names(self) -> dict[int, str]:
        """Product name of each selected GPU (empty when the query fails)."""
        out = {}
        for i, handle in self.handles.items():
            name = _query(self.nvml, lambda h=handle: self.nvml.nvmlDeviceGetName(h))
            out[i] = name.decode() if isinstance(name, bytes) else (name or "")
        return out

    def read(self, t_s: float | None = None) -> list[dict[str, Any]]:
        """One row per selected GPU (:data:`ngptune.profiling.tables.GPU_TIMELINE_TABLE` keys).

        Args:
            t_s: the row's time (s); default: seconds since the reader opened.
        """
        t_s = time.monotonic() - self._t0 if t_s is None else t_s
        return [self._row(gpu, handle, t_s) for gpu, handle in self.handles.items()]

    def _row(self, gpu: int, handle: Any, t_s: float) -> dict[str, Any]:
        nvml = self.nvml
        q = lambda call: _query(nvml, call)  # noqa: E731
        util = q(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = q(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power_mw = q(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        reasons = q(lambda: self._clock_event_reasons(handle))
        tx = q(lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES))
        rx = q(lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES))
        nvlink_tx, nvlink_rx = self._nvlink_rates(gpu, handle, t_s)
        return {
            "t_s": t_s,
            "gpu": gpu,
            "util_pct": None if util is None else float(util.gpu),
            "mem_util_pct": None if util is None else float(util.memory),
            "mem_used_mib": None if memory is None else memory.used / 2**20,
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "temp_c": _float(q(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
            "sm_clock_mhz": _float(q(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
            "mem_clock_mhz": _float(q(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))),
            "throttle_reasons": None if reasons is None else decode_throttle_reasons(reasons, nvml),
            "pcie_tx_kib_per_s": _float(tx),
            "pcie_rx_kib_per_s": _float(rx),
            "nvlink_tx_kib_per_s": nvlink_tx,
            "nvlink_rx_kib_per_s": nvlink_rx,
        }

    def _clock_event_reasons(self, handle: Any) -> int:
        query = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if query is None:  # older nvidia-ml-py
            query = self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(query(handle))

    def _nvlink_counters(self, gpu: int, handle: Any) -> tuple[float, float] | None:
        """Cumulative NVLink data KiB (tx, rx) over all links, or None where unsupported.

        Asks for the all-links sum (scopeId UINT_MAX); a driver that rejects it gets the
        per-link counters summed instead (links whose query succeeds)."""
        nvml = self.nvml
        tx_id, rx_id = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        if gpu not in self._nvlink_scopes:
            self._nvlink_scopes[gpu] = self._pick_nvlink_scopes(handle, tx_id, rx_id)
        scopes = self._nvlink_scopes[gpu]
        if scopes is None:
            return None
        fields = [(tx_id, s) for s in scopes] + [(rx_id, s) for s in scopes]
        values = _query(nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, fields))
        if values is None:
            return None
        numbers = [self._number(v) for v in values]
        half = len(scopes)
        if any(n is None for n in numbers):
            return None
        return sum(numbers[:half]), sum(numbers[half:])  # type: ignore[arg-type]

    def _pick_nvlink_scopes(self, handle: Any, tx_id: int, rx_id: int) -> list[int] | None:
        """Scope ids to query: [UINT_MAX] (all links) where supported, else the working links."""
        nvml = self.nvml
        values = _query(nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, [(tx_id, UINT_MAX), (rx_id, UINT_MAX)]))
        if values is not None and all(self._number(v) is not None for v in values):
            return [UINT_MAX]
        links = range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)))
        values = _query(nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, [(tx_id, link) for link in links]))
        if values is None:
            return None
        working = [link for link, v in zip(links, values) if self._number(v) is not None]
        return working or None

    def _number(self, value: Any) -> float | None:
        if int(value.nvmlReturn) != int(getattr(self.nvml, "NVML_SUCCESS", 0)):
            return None
        return float(value.value.ullVal)

    def _nvlink_rates(self, gpu: int, handle: Any, t_s: float) -> tuple[float | None, float | None]:
        counters = self._nvlink_counters(gpu, handle)
        if counters is None:
            self._nvlink.pop(gpu, None)
            return None, None
        now = _Counter(t_s, *counters)
        before = self._nvlink.get(gpu)
        self._nvlink[gpu] = now
        if before is None or now.t_s <= before.t_s or now.tx_kib < before.tx_kib or now.rx_kib < before.rx_kib:
            return None, None  # first sample, or a counter reset
        dt = now.t_s - before.t_s
        return (now.tx_kib - before.tx_kib) / dt, (now.rx_kib - before.rx_kib) / dt

    def close(self) -> None:
        """Shut NVML down (once)."""
        if getattr(self, "_open", False):
            self._open = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def timeline_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows of :meth:`GpuReader.read` as a DataFrame with exactly the ``gpu_timeline.csv`` columns
    (header only when there are none)."""
    return pd.DataFrame(list(rows), columns=list(GPU_TIMELINE_TABLE))


class NvmlSampler:
    """A background thread that reads every selected GPU every ``interval_s`` seconds.

    ``start()`` never raises for a missing GPU: :attr:`status` then says
    ``missing: no GPU (NVML: <reason>)`` and :meth:`frame` is empty. A query that fails leaves
    its value empty (see the module docstring); an unexpected error stops sampling and is
    reported as ``failed``.

    Args:
        interval_s: seconds between samples (> 0).
        gpus: NVML indices, or None for all.
        nvml: the NVML module (default ``pynvml``).
        on_row: called with each row in the sampling thread (e.g. to stream a CSV).

    Attributes:
        origin_unix_s: wall clock (``time.time()``, s) of the rows' ``t_s = 0`` (the reader's
            opening, just before the first sample); None when no reader opened (no GPU).
    """

    def __init__(
        self,
        interval_s: float = 0.1,
        gpus: Sequence[int] | None = None,
        *,
        nvml: Any | None = None,
        on_row: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--nvml-interval-ms: expected a positive interval, got {interval_s * 1e3:g}")
        self.interval_s = interval_s
        self.gpus = gpus
        self.nvml = nvml
        self.on_row = on_row
        self.rows: list[dict[str, Any]] = []
        self.status = SourceStatus("missing", "not started")
        self._reader: GpuReader | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self.origin_unix_s: float | None = None

    def start(self) -> "NvmlSampler":
        try:
            self._reader = GpuReader(self.gpus, self.nvml)
        except NvmlUnavailable as exc:
            self.status = SourceStatus("missing", f"no GPU (NVML: {exc.reason})")
            return self
        self.origin_unix_s = self._reader.origin_unix_s
        self.status = SourceStatus("ok", "sampling")
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        reader = self._reader
        assert reader is not None
        deadline = time.monotonic()
        try:
            while True:
                for row in reader.read():
                    self.rows.append(row)
                    if self.on_row is not None:
                        self.on_row(row)
                deadline += self.interval_s
                if self._stop.wait(max(deadline - time.monotonic(), 0.0)):
                    return
        except Exception as exc:  # report, do not kill the profile
            self._error = f"sampling stopped after {len(self.rows)} rows: {type(exc).__name__}: {exc}"

    def stop(self) -> SourceStatus:
        """Stop the thread, shut NVML down and return the final :attr:`status`."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._reader is not None:
            gpus = len(self._reader.gpus)
            self._reader.close()
            self._reader = None
            if self._error is not None:
                self.status = SourceStatus("failed", self._error)
            else:
                self.status = SourceStatus(
                    "ok", f"{len(self.rows)} samples of {gpus} GPU(s) every {self.interval_s * 1e3:g} ms"
                )
        return self.status

    def frame(self) -> pd.DataFrame:
        """The samples so far as ``gpu_timeline.csv`` (:func:`timeline_frame`)."""
        return timeline_frame(self.rows)

    def __enter__(self) -> "NvmlSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""An in-memory stand-in for the ``pynvml`` module: GPUs with raw values set by the test.

It answers the NVML calls ngptune uses with the raw units NVML returns (mW, bytes, bitmasks,
cumulative NVLink KiB counters per link, honouring ``scopeId`` like real NVML: a link id or
UINT_MAX for the sum over links), so tests check ngptune's conversions. Constants and the error
class are pynvml's own.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pynvml


@dataclasses.dataclass
class FakeGpu:
    """Raw values of one GPU; set a name in ``fail`` to make that query raise NVMLError."""

    util_gpu: int = 50
    util_memory: int = 20
    mem_used_bytes: int = 2**30
    power_mw: int = 100_000
    temp_c: int = 40
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clocks_event_reasons: int = 0
    pcie_tx_kib_per_s: int = 0
    pcie_rx_kib_per_s: int = 0
    nvlink_tx_kib: list[int] = dataclasses.field(default_factory=lambda: [0, 0])  # per link, cumulative
    nvlink_rx_kib: list[int] = dataclasses.field(default_factory=lambda: [0, 0])
    nvlink_aggregate_scope: bool = True  # whether scopeId UINT_MAX is answered
    fail: set[str] = dataclasses.field(default_factory=set)


def _not_supported() -> pynvml.NVMLError:
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def make_fake_nvml(gpus: list[FakeGpu], *, init_error: int | None = None) -> types.SimpleNamespace:
    """A module-like object with the NVML functions over ``gpus`` (``init_error``: nvmlInit fails
    with that NVML return code)."""
    calls: list[str] = []

    def check(gpu: FakeGpu, what: str) -> None:
        calls.append(what)
        if what in gpu.fail:
            raise _not_supported()

    def nvmlInit() -> None:
        calls.append("init")
        if init_error is not None:
            raise pynvml.NVMLError(init_error)

    def nvmlShutdown() -> None:
        calls.append("shutdown")

    def utilization(h: FakeGpu) -> Any:
        check(h, "utilization")
        return types.SimpleNamespace(gpu=h.util_gpu, memory=h.util_memory)

    def memory(h: FakeGpu) -> Any:
        check(h, "memory")
        return types.SimpleNamespace(used=h.mem_used_bytes, total=80 * 2**30, free=80 * 2**30 - h.mem_used_bytes)

    def power(h: FakeGpu) -> int:
        check(h, "power")
        return h.power_mw

    def temperature(h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        check(h, "temperature")
        return h.temp_c

    def clock(h: FakeGpu, which: int) -> int:
        check(h, f"clock{which}")
        return {pynvml.NVML_CLOCK_SM: h.sm_clock_mhz, pynvml.NVML_CLOCK_MEM: h.mem_clock_mhz}[which]

    def reasons(h: FakeGpu) -> int:
        check(h, "reasons")
        return h.clocks_event_reasons

    def pcie(h: FakeGpu, counter: int) -> int:
        check(h, f"pcie{counter}")
        return {pynvml.NVML_PCIE_UTIL_TX_BYTES: h.pcie_tx_kib_per_s, pynvml.NVML_PCIE_UTIL_RX_BYTES: h.pcie_rx_kib_per_s}[counter]

    def field_values(h: FakeGpu, fields: list[Any]) -> list[Any]:
        check(h, "fields")
        out = []
        for item in fields:
            field_id, scope = item if isinstance(item, tuple) else (item, 0)
            counters = {pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: h.nvlink_tx_kib,
                        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: h.nvlink_rx_kib}.get(field_id)
            ret, value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0
            if counters is not None:
                if scope == 0xFFFFFFFF and h.nvlink_aggregate_scope:
                    ret, value = pynvml.NVML_SUCCESS, sum(counters)
                elif scope < len(counters):
                    ret, value = pynvml.NVML_SUCCESS, counters[scope]
            out.append(types.SimpleNamespace(fieldId=field_id, scopeId=scope, nvmlReturn=ret,
                                             value=types.SimpleNamespace(ullVal=value)))
        return out

    def name(h: FakeGpu) -> str:
        check(h, "name")
        return "Fake H200"

    constants = {k: v for k, v in vars(pynvml).items() if k.startswith(("NVML_", "nvmlClocksEventReason"))}
    return types.SimpleNamespace(
        **constants,
        NVMLError=pynvml.NVMLError,
        calls=calls,
        nvmlInit=nvmlInit,
        nvmlShutdown=nvmlShutdown,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: gpus[i],
        nvmlDeviceGetName=name,
        nvmlDeviceGetUtilizationRates=utilization,
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetTemperature=temperature,
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetCurrentClocksEventReasons=reasons,
        nvmlDeviceGetPcieThroughput=pcie,
        nvmlDeviceGetFieldValues=field_values,
    )

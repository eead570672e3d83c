"""NVML rows: unit conversions and decoding on a fake pynvml module; the real no-GPU path here."""

from __future__ import annotations

import math
import time

import pynvml
import pytest

from ngptune.profiling.nvml import GpuReader, NvmlSampler, NvmlUnavailable, decode_throttle_reasons, import_nvml
from tests.support.fake_nvml import FakeGpu, make_fake_nvml
from trainer.contract.errors import ConfigError
from ngptune.profiling.tables import GPU_TIMELINE_TABLE


def test_row_converts_raw_nvml_units() -> None:
    gpu = FakeGpu(
        util_gpu=87, util_memory=31, mem_used_bytes=3 * 2**30 + 512 * 2**20, power_mw=351_234, temp_c=61,
        sm_clock_mhz=1755, mem_clock_mhz=2619,
        clocks_event_reasons=pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        pcie_tx_kib_per_s=1200, pcie_rx_kib_per_s=3400,
    )
    reader = GpuReader(nvml=make_fake_nvml([gpu]))
    (row,) = reader.read(t_s=0.25)
    assert list(row) == list(GPU_TIMELINE_TABLE)
    assert row["t_s"] == 0.25 and row["gpu"] == 0
    assert row["util_pct"] == 87.0 and row["mem_util_pct"] == 31.0
    assert row["mem_used_mib"] == 3584.0
    assert row["power_w"] == pytest.approx(351.234)
    assert row["temp_c"] == 61.0
    assert (row["sm_clock_mhz"], row["mem_clock_mhz"]) == (1755.0, 2619.0)
    assert row["throttle_reasons"] == "sw_power_cap|hw_thermal_slowdown"
    assert (row["pcie_tx_kib_per_s"], row["pcie_rx_kib_per_s"]) == (1200.0, 3400.0)
    reader.close()


def test_nvlink_rate_is_the_difference_of_all_link_counters_over_time() -> None:
    gpu = FakeGpu(nvlink_tx_kib=[1000, 500], nvlink_rx_kib=[0, 0])
    reader = GpuReader(nvml=make_fake_nvml([gpu]))
    (first,) = reader.read(t_s=1.0)
    assert first["nvlink_tx_kib_per_s"] is None  # no earlier sample to difference against
    gpu.nvlink_tx_kib = [3000, 1500]  # +3000 KiB over both links
    gpu.nvlink_rx_kib = [250, 250]
    (second,) = reader.read(t_s=1.5)
    assert second["nvlink_tx_kib_per_s"] == pytest.approx(6000.0)
    assert second["nvlink_rx_kib_per_s"] == pytest.approx(1000.0)
    gpu.nvlink_tx_kib = [0, 0]  # counter reset: no rate rather than a negative one
    (third,) = reader.read(t_s=2.0)
    assert third["nvlink_tx_kib_per_s"] is None


def test_nvlink_falls_back_to_summing_links_when_the_aggregate_scope_is_rejected() -> None:
    gpu = FakeGpu(nvlink_tx_kib=[10, 20, 30], nvlink_rx_kib=[0, 0, 0], nvlink_aggregate_scope=False)
    reader = GpuReader(nvml=make_fake_nvml([gpu]))
    reader.read(t_s=0.0)
    gpu.nvlink_tx_kib = [110, 120, 130]
    (row,) = reader.read(t_s=0.1)
    assert row["nvlink_tx_kib_per_s"] == pytest.approx(3000.0)


def test_a_failing_query_leaves_only_its_value_empty() -> None:
    gpu = FakeGpu(power_mw=200_000, fail={"utilization", "reasons", "fields"})
    fake = make_fake_nvml([gpu])
    reader = GpuReader(nvml=fake)
    (row,) = reader.read(t_s=0.0)
    assert row["util_pct"] is None and row["mem_util_pct"] is None
    assert row["throttle_reasons"] is None
    assert row["nvlink_tx_kib_per_s"] is None and row["nvlink_rx_kib_per_s"] is None
    assert row["power_w"] == 200.0 and row["temp_c"] == 40.0
    reader.close()
    assert fake.calls[-1] == "shutdown"


def test_throttle_reason_decoding() -> None:
    assert decode_throttle_reasons(0, pynvml) == "none"
    assert decode_throttle_reasons(pynvml.nvmlClocksEventReasonGpuIdle, pynvml) == "gpu_idle"
    mask = pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonSwThermalSlowdown | 0x10000
    assert decode_throttle_reasons(mask, pynvml) == "hw_slowdown|sw_thermal_slowdown|0x10000"


def test_gpu_selection_and_bad_index() -> None:
    fake = make_fake_nvml([FakeGpu(temp_c=30), FakeGpu(temp_c=70)])
    reader = GpuReader(gpus=[1], nvml=fake)
    assert [(r["gpu"], r["temp_c"]) for r in reader.read(t_s=0.0)] == [(1, 70.0)]
    reader.close()
    with pytest.raises(ConfigError, match=r"--gpus: GPU 2 not found \(NVML sees 2 GPU"):
        GpuReader(gpus=[0, 2], nvml=make_fake_nvml([FakeGpu(), FakeGpu()]))


def test_init_failure_and_zero_gpus_are_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match=r"no NVIDIA GPU found \(NVML: Driver Not Loaded\)"):
        GpuReader(nvml=make_fake_nvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    fake = make_fake_nvml([])
    with pytest.raises(NvmlUnavailable, match="0 GPUs"):
        GpuReader(nvml=fake)
    assert fake.calls[-1] == "shutdown"


def test_sampler_thread_samples_at_its_interval_and_stops() -> None:
    streamed = []
    sampler = NvmlSampler(0.02, nvml=make_fake_nvml([FakeGpu(), FakeGpu()]), on_row=streamed.append).start()
    time.sleep(0.15)
    status = sampler.stop()
    frame = sampler.frame()
    assert status.status == "ok" and "every 20 ms" in status.detail
    assert list(frame.columns) == list(GPU_TIMELINE_TABLE)
    assert len(frame) >= 6 and len(frame) % 2 == 0  # both GPUs each round
    assert len(streamed) == len(frame)
    times = frame[frame["gpu"] == 0]["t_s"].to_numpy()
    assert all(b > a for a, b in zip(times, times[1:]))
    n = len(frame)
    time.sleep(0.05)
    assert len(sampler.frame()) == n  # stopped means stopped


def test_sampler_reports_a_broken_query_loop_as_failed() -> None:
    def explode(row: dict) -> None:
        raise OSError("disk full")

    sampler = NvmlSampler(0.01, nvml=make_fake_nvml([FakeGpu()]), on_row=explode).start()
    time.sleep(0.05)
    status = sampler.stop()
    assert status.status == "failed" and "OSError: disk full" in status.detail


def test_no_gpu_on_this_machine_is_reported_missing() -> None:
    """The real path: this machine's NVML (nvidia-ml-py without a driver) reports why."""
    try:
        reader = GpuReader(nvml=import_nvml())
    except NvmlUnavailable as exc:
        reason = exc.reason
    else:  # a GPU host: the real reader works
        rows = reader.read()
        reader.close()
        assert rows and all(math.isfinite(r["t_s"]) for r in rows)
        return
    sampler = NvmlSampler(0.05).start()
    status = sampler.stop()
    assert status.status == "missing"
    assert status.detail == f"no GPU (NVML: {reason})"
    assert sampler.origin_unix_s is None  # no reader opened: the profile's timeline stays empty
    assert sampler.frame().empty and list(sampler.frame().columns) == list(GPU_TIMELINE_TABLE)


def test_sampler_records_the_wall_clock_of_its_time_zero() -> None:
    """collect.align_gpu_timeline moves the samples to the training clock from this origin."""
    before = time.time()
    sampler = NvmlSampler(0.01, nvml=make_fake_nvml([FakeGpu()])).start()
    after = time.time()
    time.sleep(0.05)
    sampler.stop()
    assert before <= sampler.origin_unix_s <= after
    times = sampler.frame()["t_s"].to_numpy()
    assert len(times) >= 2 and times[0] >= 0.0
    assert NvmlSampler(0.01).origin_unix_s is None  # not started: no clock

"""Quantities a person reads: samples per ray with one decimal, the occupancy as a percentage."""

from __future__ import annotations

from trainer.contract.metrics import quantity_text


def test_samples_per_ray_has_one_decimal_and_occupancy_is_a_percentage():
    assert quantity_text("samples_per_ray", 72.71) == "72.7"
    assert quantity_text("occupancy_fraction", 0.0761) == "7.6 %"
    assert quantity_text("occupancy_fraction", 1.0) == "100.0 %"
    assert quantity_text("samples_per_s", 6.1e6) == "6.10 M samples/s"  # the rates keep theirs


def test_long_microseconds_read_in_ms_and_slow_links_in_mb_per_s():
    from trainer.contract import quantity_text

    assert quantity_text("self_cuda_time_total_us", 208259.7) == "208.3 ms"
    assert quantity_text("time_us", 12.5) == "12.5 µs"
    assert quantity_text("algbw_gb_per_s", 0.0594) == "59.4 MB/s"
    assert quantity_text("busbw_gb_per_s", 45.2) == "45.2 GB/s"

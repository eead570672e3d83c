"""Quantities a person reads: samples per ray with one decimal, the occupancy as a percentage."""

from __future__ import annotations

from trainer.contract.metrics import quantity_text


def test_samples_per_ray_has_one_decimal_and_occupancy_is_a_percentage():
    assert quantity_text("samples_per_ray", 72.71) == "72.7"
    assert quantity_text("occupancy_fraction", 0.0761) == "7.6 %"
    assert quantity_text("occupancy_fraction", 1.0) == "100.0 %"
    assert quantity_text("samples_per_s", 6.1e6) == "6.10 M samples/s"  # the rates keep theirs

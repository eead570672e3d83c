"""The JSON line that ends a run's output is strict JSON, as status.json is."""

from __future__ import annotations

import json

from trainer.contract.runstatus import result_line


def test_a_nan_field_is_null_with_its_reason_and_the_line_parses_strictly() -> None:
    line = result_line({"state": "completed", "scene": "/data/fox", "eval_ssim": float("nan"), "step": 5})
    parsed = json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert parsed["eval_ssim"] is None and "not a number" in parsed["null_reasons"]["eval_ssim"]
    assert parsed["step"] == 5 and "scene" not in parsed

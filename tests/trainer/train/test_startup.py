"""The start-up's console lines: counts in words, under 80 columns."""

from __future__ import annotations

from trainer.contract.textlines import LINE_WIDTH, joined
from trainer.train.startup import StartupReport


def test_the_start_up_line_counts_in_words_and_fits_80_columns():
    one = StartupReport(startup_s=2.34, startup_steps=1, kernels_compiled=1, step_kind="dynamic", step_reason="")
    assert one.line() == "start-up 2.3 s (1 kernel compiled; 1 step), then the clock; step: dynamic"  # not "1 steps"
    cached = StartupReport(startup_s=14.0, startup_steps=3, kernels_compiled=0, step_kind="dynamic",
                           step_reason="the captured step needs CUDA and a fixed-capacity march; this run has neither")
    lines = cached.line().splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines
    assert joined(lines) == ("start-up 14.0 s (kernels from the cache; 3 steps), then the clock; step: dynamic — the "
                             "captured step needs CUDA and a fixed-capacity march; this run has neither")


def bracket_depth(text: str) -> int:
    """The deepest nesting of round brackets in ``text``; -1 when they do not balance."""
    depth = deepest = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, depth)
        if depth < 0:
            return -1
    return deepest if depth == 0 else -1


def test_the_step_line_nests_no_brackets_for_any_reason():
    for reason in ("training.device is cpu: CUDA graph capture needs CUDA", "2 ranks: the distributed steps are not captured",
                   "training.precision fp16 (the captured step covers fp32, tf32 and bf16)"):
        report = StartupReport(startup_s=1.0, startup_steps=1, kernels_compiled=0, step_kind="dynamic",
                               step_reason=reason)
        assert bracket_depth(joined(report.line().splitlines())) == 1, report.line()

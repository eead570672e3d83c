"""A warning whose first word is a path longer than a line keeps that path beside its prefix."""

from __future__ import annotations

from trainer.contract.runstatus import fitted_warning
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined


def test_a_long_first_path_stays_on_the_prefix_line_and_the_rest_wraps() -> None:
    path = "/tmp/" + "deep/" * 20 + "status.json:"
    text = f"{path} the run did not finish: stale: process 25384 no longer exists, killed before it could write its end"
    lines = f"warning: {fitted_warning(text)}".splitlines()
    assert lines[0] == f"warning: {path}"
    assert len(lines) > 1 and all(line.startswith(CONTINUATION) and len(line) <= LINE_WIDTH for line in lines[1:])
    assert joined(lines) == f"warning: {text}"


def test_a_short_warning_is_one_line() -> None:
    assert fitted_warning("--video out.mp4: no encoder") == "--video out.mp4: no encoder"

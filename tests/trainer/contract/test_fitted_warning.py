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


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_an_error_is_wrapped_for_a_terminal_and_one_line_for_a_reader(monkeypatch, capsys) -> None:
    import sys

    from trainer.contract.runstatus import error_line, print_error

    message = ("encoding.table_dtype: training needs 'float32' tables, got 'float16' (the optimiser updates the "
               "table in place; a float16 table loses the small updates of late training)")
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    print_error(message)  # captured: no terminal
    assert capsys.readouterr().err == error_line(message) + "\n"
    screen = _Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    print_error(message)
    lines = screen.text.splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines)
    assert joined(lines) == error_line(message)
    monkeypatch.setenv("LOCAL_RANK", "0")  # a rank: its launcher reads one line
    screen.text = ""
    print_error(message)
    assert screen.text == error_line(message) + "\n"

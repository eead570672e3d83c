"""A mistyped flag of a sub-command: the sub-command's usage and error, with the close flag it
knows; ``ngptune --version``."""

from __future__ import annotations

import pytest

from ngptune.cli import main


def _error(argv, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(("argv", "prog", "typo", "meant"), [
    (["inspect", "X", "--jsn"], "ngptune inspect", "--jsn", "--json"),
    (["train", "--time-budgt", "5"], "ngptune train", "--time-budgt 5", "--time-budget"),
    (["train", "--time-budgt=5"], "ngptune train", "--time-budgt=5", "--time-budget"),
    (["render", "R", "--frams", "1"], "ngptune render", "--frams 1", "--frames"),
    (["export", "mesh", "R", "--resoluton", "32"], "ngptune export mesh", "--resoluton 32", "--resolution"),
    (["sweep", "--stduy", "x"], "ngptune sweep", "--stduy x", "--study"),
])
def test_a_mistyped_flag_is_reported_by_its_sub_command(argv, prog, typo, meant, capsys, monkeypatch):
    err = _error(argv, capsys, monkeypatch)
    lines = err.splitlines()
    assert lines[0].startswith(f"usage: {prog} ")
    assert lines[-1] == f"{prog}: error: unrecognized arguments: {typo} (did you mean {meant}?)"
    assert "{inspect,demo-scene" not in err  # not the list of every sub-command
    assert all(len(line) <= 80 for line in lines[:-1])  # the usage fits the terminal


def test_a_flag_close_to_none_gets_no_guess(capsys, monkeypatch):
    err = _error(["export", "mesh", "R", "--bogus"], capsys, monkeypatch)
    assert err.splitlines()[-1] == "ngptune export mesh: error: unrecognized arguments: --bogus"


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"ngptune {version('ngptune')}\n"


def _help(argv, capsys, monkeypatch, columns: int) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        main([*argv, "-h"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def _bare(token: str) -> str:
    return token.strip("()[]{},;:.'\"")


def _sub_commands() -> list[str]:
    from ngptune.cli import build_parser

    action = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(action.choices)


@pytest.mark.parametrize("command", _sub_commands())
def test_help_breaks_lines_only_between_words(command, capsys, monkeypatch):
    """At 80 columns no help line ends or starts with a piece of a word the help holds whole (a
    constant, a flag, a path), as argparse's own wrapping left ``...STEP_BU`` / ``DGET_...`` in
    ``sweep -h``."""
    whole = {_bare(token) for token in _help([command], capsys, monkeypatch, 400).split()}
    lines = _help([command], capsys, monkeypatch, 80).splitlines()
    edges = [_bare(line.split()[i]) for line in lines if line.split() for i in (0, -1)]
    pieces = [edge for edge in edges if edge and edge not in whole and any(edge in word for word in whole)]
    assert pieces == [], pieces


def test_sweep_help_names_the_variable_that_sets_the_trials_per_gpu(capsys, monkeypatch):
    from ngptune.tuning.concurrency import STEP_BUDGET_TRIALS_PER_GPU, STEP_BUDGET_TRIALS_PER_GPU_ENV

    text = " ".join(_help(["sweep"], capsys, monkeypatch, 80).split())
    assert (f"--trials-per-gpu K let K trials share one GPU (default 1; a step-budget study on GPUs packs "
            f"{STEP_BUDGET_TRIALS_PER_GPU}, or ${STEP_BUDGET_TRIALS_PER_GPU_ENV} when it is set)") in text


def test_the_top_level_usage_fits_80_columns_and_the_help_lists_the_commands(capsys, monkeypatch):
    err = _error(["bogus"], capsys, monkeypatch)
    usage = err.splitlines()[0]
    assert usage == "usage: ngptune [-h] [--version] COMMAND ..." and "invalid choice: 'bogus'" in err
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "{inspect" not in out and all(len(line) <= 80 for line in out.splitlines())
    assert all(f"\n    {name}" in out for name in ("inspect", "demo-scene", "train", "sweep", "train-many"))


def test_a_ctrl_c_that_no_command_took_ends_with_one_line(monkeypatch, capsys):
    """Ctrl-C while ngptune reads its flags (before a command takes it): 130 and one line, no traceback."""
    from ngptune import cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err == "interrupted\n"

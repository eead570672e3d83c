"""parse_command_line: unknown words reported by the deepest sub-command chosen, with a close flag."""

from __future__ import annotations

import argparse

import pytest

from trainer.contract.usage import chosen_parser, close_flags, parse_command_line


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tool")
    commands = top.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export")
    kinds = export.add_subparsers(required=True)  # no dest: found by its word on the command line
    mesh = kinds.add_parser("mesh")
    mesh.add_argument("model")
    mesh.add_argument("--resolution", type=int, default=8)
    run = commands.add_parser("run")
    run.add_argument("--time-budget", type=float)
    run.add_argument("-q", "--quiet", action="store_true")
    return top


def test_a_good_command_line_parses():
    args = parse_command_line(_parser(), ["export", "mesh", "M", "--resolution", "4"])
    assert (args.command, args.model, args.resolution) == ("export", "M", 4)


def test_the_deepest_chosen_sub_command_reports_with_a_close_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_command_line(_parser(), ["export", "mesh", "M", "--resoluton", "4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: tool export mesh ")
    assert err[-1] == "tool export mesh: error: unrecognized arguments: --resoluton 4 (did you mean --resolution?)"


def test_chosen_parser_and_close_flags():
    parser = _parser()
    args, _ = parser.parse_known_args(["run", "--quiet"])
    run = chosen_parser(parser, args, ["run", "--quiet"])
    assert run.prog == "tool run"
    assert close_flags(run, "--time-budgt=3") == ["--time-budget"]
    assert close_flags(run, "--qiet") == ["--quiet"]
    assert close_flags(run, "--zzz") == [] and close_flags(run, "budget") == []

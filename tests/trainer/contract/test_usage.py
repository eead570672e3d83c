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


def test_help_is_wrapped_at_spaces_only(monkeypatch):
    from trainer.contract.usage import WholeWordsHelpFormatter, keep_words_whole

    monkeypatch.setenv("COLUMNS", "60")
    top = _parser()
    run = chosen_parser(top, argparse.Namespace(command="run"), ["run"])
    name = "SOME_RATHER_LONG_ENVIRONMENT_VARIABLE_NAME_OF_THE_TOOL"
    run.add_argument("--trials-per-gpu", help=f"share a GPU between trials a--hyphenated-flag--of-some-length {name}")
    assert name not in run.format_help()  # argparse breaks it
    keep_words_whole(top)
    text = run.format_help()
    assert name in text and "a--hyphenated-flag--of-some-length" in text, text
    mesh = chosen_parser(top, argparse.Namespace(command="export"), ["export", "mesh"])
    assert mesh.formatter_class is WholeWordsHelpFormatter  # every sub-command, at any depth


def test_a_parser_with_a_formatter_of_its_own_keeps_it():
    from trainer.contract.usage import keep_words_whole

    raw = argparse.ArgumentParser(prog="raw", formatter_class=argparse.RawDescriptionHelpFormatter)
    assert keep_words_whole(raw).formatter_class is argparse.RawDescriptionHelpFormatter

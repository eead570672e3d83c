"""Command lines with a mistyped flag: the error of the sub-command that was chosen.

``argparse`` reports flags no parser knows from the top parser, with the top usage (the list of
every sub-command) and ``prog: error: unrecognized arguments: ...``. :func:`parse_command_line`
parses leniently, finds the deepest sub-command the command line chose (``ngptune export mesh``)
and lets that parser report them, with its own usage and, for a flag close to one it knows, a
hint: ``ngptune train: error: unrecognized arguments: --time-budgt 5 (did you mean
--time-budget?)``.

Help text is wrapped at spaces only (:class:`WholeWordsHelpFormatter`, set on every parser of the
command line by :func:`keep_words_whole`): argparse's own wrapping breaks a word longer than the
help column, or at its hyphens (``--allow-shared-`` / ``gpu``, ``STEP_BU`` / ``DGET``), where a
reader copying a flag or a name would lose it.
"""

from __future__ import annotations

import argparse
import difflib
import textwrap
from collections.abc import Sequence

__all__ = ["WholeWordsHelpFormatter", "chosen_parser", "close_flags", "keep_words_whole", "parse_command_line"]


class WholeWordsHelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, its text wrapped at spaces only: a flag, a path or a name longer
    than the column stays whole on a line of its own (the line may then be longer), and no word
    is broken at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False)


def keep_words_whole(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` and every sub-command parser under it :class:`WholeWordsHelpFormatter`
    (those with a formatter of their own, such as ``RawDescriptionHelpFormatter``, keep it);
    returns ``parser``."""
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = WholeWordsHelpFormatter
    action = _subcommands(parser)
    for sub in (action.choices.values() if action is not None else ()):
        keep_words_whole(sub)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  argv: Sequence[str]) -> argparse.ArgumentParser:
    """The deepest parser of ``parser``'s sub-commands that ``args`` (parsed from ``argv``)
    chose; ``parser`` itself when it has none. A sub-command is found by its ``dest`` in
    ``args``, or, without one, as the first word of ``argv`` that names it."""
    words = list(argv)
    while (action := _subcommands(parser)) is not None:
        name = getattr(args, action.dest, None) if action.dest != argparse.SUPPRESS else None
        if name not in action.choices:
            name = next((word for word in words if word in action.choices), None)
        if name is None:
            break
        if name in words:
            words = words[words.index(name) + 1:]
        parser = action.choices[name]
    return parser


def close_flags(parser: argparse.ArgumentParser, word: str) -> list[str]:
    """The option strings of ``parser`` closest to ``word`` (a ``--flag`` or ``--flag=value``),
    best first, at most one: ``[]`` when ``word`` is no flag or none is close."""
    if not word.startswith("-"):
        return []
    name = word.split("=", 1)[0].lstrip("-")  # compared without dashes, which every flag shares
    options = {option.lstrip("-"): option for action in parser._actions for option in action.option_strings}
    return [options[match] for match in difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)]


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` (its help wrapped at spaces only, :func:`keep_words_whole`);
    words no parser knows are reported by the sub-command that was chosen (:func:`chosen_parser`): its usage on stderr, then ``PROG: error: unrecognized
    arguments: ...`` with ``(did you mean --flag?)`` for each close flag, and exit status 2.

    Raises:
        SystemExit: 2 on a bad command line (argparse's own errors, and unknown words); 0 after
            ``--help`` or ``--version``.
    """
    keep_words_whole(parser)
    args, extras = parser.parse_known_args(list(argv))
    if extras:
        chosen = chosen_parser(parser, args, argv)
        hints = [match for word in extras for match in close_flags(chosen, word)]
        hint = f" (did you mean {' or '.join(dict.fromkeys(hints))}?)" if hints else ""
        chosen.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
    return args

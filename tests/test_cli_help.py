"""Every subcommand of `dpscaling` and every option of each says what it is in `--help`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from dpscaling import cli


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                 ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """(path, parser, help shown in the parent's list) of every subcommand below ``parser``, depth first."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        # argparse lists a subcommand in its parent's help only when add_parser got help=.
        listed = {choice.dest: choice.help for choice in action._choices_actions}
        seen: set[int] = set()
        for name, subparser in action.choices.items():
            if id(subparser) in seen:  # an alias of a subcommand already walked
                continue
            seen.add(id(subparser))
            yield (*path, name), subparser, listed.get(name)
            yield from _subcommands(subparser, (*path, name))


def _has_text(text: str | None) -> bool:
    return text is not None and text != argparse.SUPPRESS and bool(text.strip())


def _options(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str | None]]:
    """(name, help) of every option and positional argument of ``parser`` but -h/--help and subcommands."""
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        yield "/".join(action.option_strings) or action.dest, action.help


SUBCOMMANDS = list(_subcommands(cli.build_parser()))
PATHS = [path for path, _, _ in SUBCOMMANDS]


def test_the_walk_finds_the_subcommands() -> None:
    assert {("sigma",), ("accounting-table", "chunk"), ("params",), ("floor",), ("fit",)} <= set(PATHS)


def test_every_subcommand_has_a_help_text() -> None:
    missing = [" ".join(path) for path, _, shown in SUBCOMMANDS if not _has_text(shown)]
    assert missing == [], "subcommands without help=: " + ", ".join(missing)


def test_every_option_has_a_help_text() -> None:
    parsers = [("dpscaling", cli.build_parser())]
    parsers += [(" ".join(("dpscaling", *path)), parser) for path, parser, _ in SUBCOMMANDS]
    missing = [f"{where}: {name}" for where, parser in parsers
               for name, text in _options(parser) if not _has_text(text)]
    assert missing == [], "options without help=:\n" + "\n".join(missing)


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_exits_zero(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*path, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: dpscaling {' '.join(path)}")

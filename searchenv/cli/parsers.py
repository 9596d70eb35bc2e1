"""The parser classes of the ``searchenv`` command: help that shows defaults, and argv-dependent defaults.

Kept apart from :mod:`searchenv.cli.arguments` (which imports the environment) so that building the top-level
parser for ``searchenv --help`` imports nothing but argparse.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CommandParser", "HelpFormatter", "TopParser", "unrecognized"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default, except where there is none to show (``None``, off, empty)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        nothing = action.default is None or action.default is False or action.default == []
        if nothing or action.default is argparse.SUPPRESS or "%(default)" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action) or ""


def unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """The error for words ``parser`` does not take, with the nearest of its options to the first unknown one
    (``--modle`` → ``--model``): every command's parser says it the same way."""
    from searchenv.checks import did_you_mean

    options = [option for action in parser._actions for option in action.option_strings]
    unknown = next((word.split("=", 1)[0] for word in extras if word.startswith("-")), None)
    hint = did_you_mean(unknown, options) if unknown else ""
    return f"unrecognized arguments: {' '.join(extras)}{hint}"


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: help shows defaults, and ``defaults_from_argv`` may set the defaults from the words.

    ``defaults_from_argv(parser, argv)`` runs before each parse (``--help`` included), so a recipe switch such as
    ``train-ppo --paper`` changes every default the user did not set, and ``--help`` shows the recipe's values.
    """

    def __init__(
        self,
        *args: Any,
        formatter_class: type[argparse.HelpFormatter] = HelpFormatter,
        defaults_from_argv: Callable[[argparse.ArgumentParser, Sequence[str] | None], None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)
        self._defaults_from_argv = defaults_from_argv

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        hook, self._defaults_from_argv = self._defaults_from_argv, None  # the hook may parse with this parser too
        try:
            if hook is not None:
                hook(self, args)
            return super().parse_known_args(args, namespace)
        finally:
            self._defaults_from_argv = hook

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized(self, extras))
        return parsed


class TopParser(argparse.ArgumentParser):
    """The ``searchenv`` parser: words a command does not take are reported by that command's parser (its usage,
    ``searchenv eval: error: ...``) with the nearest option, not by the top parser."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
            command = commands.choices.get(getattr(parsed, commands.dest, None) or "", self)
            command.error(unrecognized(command, extras))
        return parsed

"""The ``searchenv`` command (:func:`main`): a table of subcommands, each loaded only when it runs."""

from searchenv.cli.main import main

__all__ = ["main"]

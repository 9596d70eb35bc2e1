"""Moved to :mod:`searchenv.cli.verl_data` (``searchenv verl-data``); kept so that
``python -m searchenv.adapters.verl_data`` (and launcher settings that name it) keep working."""

from searchenv.cli.verl_data import main

__all__ = ["main"]

if __name__ == "__main__":
    main()

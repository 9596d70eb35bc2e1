"""Moved to :mod:`searchenv.adapters.rows`; kept so that ``python -m searchenv.adapters.verl_data``
(and launcher settings that name it) keep working."""

from searchenv.adapters.rows import main

__all__ = ["main"]

if __name__ == "__main__":
    main()

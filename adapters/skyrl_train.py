"""Moved to :mod:`searchenv.adapters.skyrl.train`; kept so that ``python -m searchenv.adapters.skyrl_train``
(and launcher settings that name it) keep working."""

from searchenv.adapters.skyrl.train import main

__all__ = ["main"]

if __name__ == "__main__":
    main()

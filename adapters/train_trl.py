"""Moved to :mod:`searchenv.adapters.trl.train`; kept so that ``python -m searchenv.adapters.train_trl``
(and launcher settings that name it) keep working."""

from searchenv.adapters.trl.train import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())

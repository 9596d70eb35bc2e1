"""Moved to :mod:`searchenv.adapters.ppo.train`; kept so that ``python -m searchenv.adapters.train_ppo``
(and launcher settings that name it) keep working."""

from searchenv.adapters.ppo.train import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())

"""Where questions come from: dataset files and hub names (:mod:`.datasets`), the hub download behind
``searchenv prepare`` (:mod:`.hub`), and the embedded generated world (:mod:`.world`)."""

from searchenv.data.datasets import DEFAULT_SPLIT, load_dataset

__all__ = ["DEFAULT_SPLIT", "load_dataset"]

"""``python -m searchenv.retrievers.server``: the same as ``searchenv serve`` (:mod:`searchenv.cli.serve`)."""

import sys

from searchenv.cli.serve import main

sys.exit(main())

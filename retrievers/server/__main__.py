"""``python -m searchenv.retrievers.server``: the same as ``searchenv serve``."""

import sys

from searchenv.retrievers.server.command import main

sys.exit(main())

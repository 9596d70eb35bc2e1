"""``python -m searchenv.cli``: the same as the ``searchenv`` command."""

import sys

from searchenv.cli.main import main

sys.exit(main())

"""The README's first Python example runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io

from readme_example import README, check_quickstart_output, quickstart


def test_readme_quickstart_runs():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(quickstart(), str(README), "exec"), {})
    check_quickstart_output(out.getvalue())

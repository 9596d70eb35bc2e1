"""The README's first Python example runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quickstart_runs():
    quickstart = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(quickstart, str(README), "exec"), {})
    printed = out.getvalue()
    assert "In what year was Brosara founded?" in printed
    assert "Doc 1(Title: Brosara) Brosara is a market town" in printed
    assert printed.strip().splitlines()[-1].startswith("1.0 {'answer_score': 1.0, 'em': 1.0")

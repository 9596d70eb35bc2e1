"""The README's first Python example and what its comments promise it prints: shared by the test that runs it
in this checkout (tests/test_readme.py) and the one that runs it from a clean install (tests/test_packaging.py)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart() -> str:
    """The first ``python`` code block of the README."""
    return re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL).group(1)


def check_quickstart_output(printed: str) -> None:
    """Assert the quickstart printed the question, the passage and the reward its comments show."""
    assert "In what year was Brosara founded?" in printed, printed
    assert "Doc 1(Title: Brosara) Brosara is a market town" in printed, printed
    assert printed.strip().splitlines()[-1].startswith("1.0 {'answer_score': 1.0, 'em': 1.0"), printed

"""The transcript viewer rendered by a real headless browser (Debian's chromium): it draws, it escapes, it filters."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from searchenv.cli.main import main
from searchenv.evaluation.viewer import render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _record(i: int, status: str, searches: int, dataset: str) -> dict:
    answered = status != "noanswer"
    segments = [{"author": "model", "text": "<think> look it up </think>\n<search> q </search>"}] * min(searches, 1)
    if searches:
        segments.append({"author": "env", "text": "\n\n<information>Doc 1(Title: T) text</information>\n\n"})
    if answered:
        segments.append({"author": "model", "text": "<answer> <script>alert(1)</script> </answer>"})
    return {
        "policy": "p",
        "method": "agent",
        "retriever": "bm25",
        "dataset": dataset,
        "id": str(i),
        "question": f"question {i} <b>&</b>",
        "golden_answers": ["gold"],
        "prediction": "<script>alert(1)</script>" if answered else None,
        "reward": float(status == "correct"),
        "reward_parts": {"em": float(status == "correct")},
        "em": float(status == "correct"),
        "f1": 0.0,
        "cem": 0.0,
        "retrieval_hit": 1.0,
        "num_searches": searches,
        "num_invalid": 0,
        "end_reason": "answer" if answered else "action_budget",
        "response_tokens": 10,
        "segments": segments,
    }


RECORDS = [
    _record(0, "correct", 1, "nq"),
    _record(1, "wrong", 1, "nq"),
    _record(2, "wrong", 0, "hotpotqa"),
    _record(3, "noanswer", 2, "hotpotqa"),
]


def test_everything_from_the_transcripts_is_escaped():
    page = render_html(RECORDS)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "question 0 &lt;b&gt;&amp;&lt;/b&gt;" in page
    assert page.count('class="card ') == 4
    for kind in ("think", "search", "information", "answer"):
        assert f'class="{kind}"' in page


def test_view_rejects_a_malformed_transcripts_file(tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n{not json\n" + json.dumps(RECORDS[1]) + "\n")
    assert main(["view", str(bad), "-o", str(tmp_path / "o.html")]) == 2
    assert "t.jsonl:2: not an evaluation transcript record" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.html")]) == 2
    assert "transcripts file not found" in capsys.readouterr().err


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=90)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make installs it: apt-get install chromium)")
def test_viewer_renders_and_filters_in_headless_chromium(tmp_path):
    from PIL import Image

    transcripts = tmp_path / "t.jsonl"
    transcripts.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    page = tmp_path / "view.html"
    assert main(["view", str(transcripts), "-o", str(page)]) == 0

    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,800", page.as_uri())
    image = Image.open(shot).convert("L")
    histogram = image.histogram()
    assert image.size == (1000, 800)
    assert sum(histogram[:200]) > 2_000, "the page rendered (almost) nothing but background"

    def shown(hash_: str) -> tuple[int, str]:
        dom = _chromium(tmp_path, "--dump-dom", page.as_uri() + hash_).stdout
        cards = re.findall(r'<div class="card [^"]*"[^>]*>', dom)
        assert len(cards) == 4, dom[:500]
        visible = [c for c in cards if " hidden" not in c]
        return len(visible), re.search(r'<span id="shown">(\d+)</span>', dom).group(1)

    assert shown("") == (4, "4")
    assert shown("#status=wrong") == (2, "2")
    assert shown("#status=noanswer") == (1, "1")
    assert shown("#dataset=hotpotqa&searches=0") == (1, "1")

    def summary(hash_: str) -> list[tuple[str, str, str]]:
        """The visible summary table's visible rows: (dataset, n, EM); it summarised every episode before."""
        dom = _chromium(tmp_path, "--dump-dom", page.as_uri() + hash_).stdout
        [table] = [t for t in re.findall(r"<table class=\"summary\"[^>]*>.*?</table>", dom) if " hidden" not in t[:90]]
        rows = re.findall(r"<tr data-dataset=\"([^\"]+)\"[^>]*?( hidden=\"\")?>(.*?)</tr>", table)
        cells = [(d, re.findall(r"<td>(.*?)</td>", body)) for d, hidden, body in rows if not hidden]
        return [(d, c[4], c[6]) for d, c in cells]

    assert summary("") == [("nq", "2", "0.500"), ("hotpotqa", "2", "0.000")]
    assert summary("#status=wrong") == [("nq", "1", "0.000"), ("hotpotqa", "1", "0.000")]
    assert summary("#dataset=nq") == [("nq", "2", "0.500")]
    assert summary("#dataset=hotpotqa&searches=0") == [("hotpotqa", "1", "0.000")]

"""``searchenv view``: one static HTML file to read evaluation transcripts.

One card per episode (question, gold vs prediction, reward parts, the response with think / search / information /
answer styled apart), a summary table on top, and filters (correct, wrong, no answer; number of searches; dataset;
method; retriever) that also live in the URL hash (``out.html#status=wrong&searches=0``), so a filtered view can be
linked. The summary follows the filters: it is :func:`~searchenv.evaluation.report.summarize` of the episodes shown
(one table per answer / searches choice, written here, with its rows shown by dataset, method and retriever), so
its metrics are never computed a second time in the page's script. Every piece of text from the transcripts is
HTML-escaped; the page loads nothing from the network.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from searchenv.evaluation.report import format_value, shown_metrics, summarize

__all__ = ["load_transcripts", "render_html", "write_viewer"]

# Tag pairs shown in colour: <think>…</think>, <search>…</search>, <answer>…</answer>, R1-Searcher's
# <|begin_of_query|>…<|end_of_query|>, R-Search's <original_evidence>… Display only; metrics never come from here.
_TAGGED = re.compile(r"(<(\w+)>.*?</\2>|<\|begin_of_(\w+)\|>.*?<\|end_of_\3\|>)", re.DOTALL)
_KIND = {"think": "think", "search": "search", "query": "search", "answer": "answer", "original_evidence": "evidence"}

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d1f23}
header{background:#fff;padding:12px 20px;border-bottom:1px solid #ddd;position:sticky;top:0;z-index:1}
h1{font-size:18px;margin:0 0 8px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#eef}
td:first-child,td:nth-child(2),td:nth-child(3),td:nth-child(4){text-align:left}
.filters label{margin-right:14px}
main{padding:12px 20px}
.card{background:#fff;border:1px solid #d6d8dc;border-left:6px solid #999;border-radius:4px;margin:10px 0;padding:10px}
.card.correct{border-left-color:#2e9d46}.card.wrong{border-left-color:#d0433c}.card.noanswer{border-left-color:#b9a000}
.meta{color:#555;font-size:12px}
.q{font-weight:600;margin:4px 0}
.gold{color:#2e7d32}.pred{color:#1a4fb5}
.resp{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12px;background:#fafafa;padding:6px;
 border:1px solid #eee;margin-top:6px}
.think{color:#6a6a6a;font-style:italic}
.search{background:#e3efff;color:#0b3d91;font-weight:600}
.answer{background:#dff5e1;color:#145a1f;font-weight:700}
.evidence{background:#fff4d6}
.information{display:block;background:#fff8e6;border-left:3px solid #e0b000;color:#5c4a00;margin:4px 0;padding:2px 6px}
.hint{display:block;background:#fde8e8;color:#8a1c1c;margin:4px 0;padding:2px 6px}
.parts{font-size:11px;color:#444}
"""

_JS = """
const cards=[...document.querySelectorAll('.card')];
const keys=['status','searches','dataset','method','retriever'];
function readHash(){const p=new URLSearchParams(location.hash.slice(1));
 for(const k of keys){const el=document.getElementById('f-'+k);if(el&&p.has(k))el.value=p.get(k);}}
function apply(){const want={};for(const k of keys){want[k]=document.getElementById('f-'+k).value;}
 let shown=0;for(const c of cards){let ok=true;
  for(const k of keys){if(want[k]!=='all'&&c.dataset[k]!==want[k])ok=false;}
  c.hidden=!ok;if(ok)shown++;}
 for(const t of document.querySelectorAll('table.summary')){
  t.hidden=t.dataset.status!==want.status||t.dataset.searches!==want.searches;
  for(const r of t.querySelectorAll('tr[data-dataset]')){let ok=true;
   for(const k of ['dataset','method','retriever']){if(want[k]!=='all'&&r.dataset[k]!==want[k])ok=false;}
   r.hidden=!ok;}}
 document.getElementById('shown').textContent=shown;
 const p=new URLSearchParams();for(const k of keys){if(want[k]!=='all')p.set(k,want[k]);}
 const h=p.toString();if(('#'+h)!==location.hash&&!(h===''&&location.hash===''))history.replaceState(null,'','#'+h);}
for(const k of keys){document.getElementById('f-'+k).addEventListener('change',apply);}
window.addEventListener('hashchange',()=>{readHash();apply();});
readHash();apply();
"""


def load_transcripts(path: str | Path) -> list[dict[str, Any]]:
    """Records of a transcripts.jsonl; a malformed line is an error naming it (a last line cut by an interrupt is
    skipped with a note, as the evaluation itself does)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"transcripts file not found: {path} (searchenv eval writes OUTPUT/transcripts.jsonl)")
    records = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "segments" not in record or "golden_answers" not in record:
                raise ValueError("missing 'segments' or 'golden_answers'")
        except (json.JSONDecodeError, ValueError) as exc:
            if line_no == len(lines):  # no newline after it: the unfinished line of an interrupted run
                print(f"note: {path}:{line_no}: skipped an unfinished last line")
                continue
            raise ValueError(f"{path}:{line_no}: not an evaluation transcript record ({exc})") from None
        records.append(record)
    if not records:
        raise ValueError(f"{path} holds no transcript records")
    return records


def _status(record: Mapping[str, Any]) -> str:
    if record.get("end_reason") != "answer":
        return "noanswer"
    return "correct" if record.get("em") == 1 else "wrong"


def _model_html(text: str) -> str:
    out, pos = [], 0
    for m in _TAGGED.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        name = m.group(2) or m.group(3)
        out.append(f'<span class="{_KIND.get(name, "think")}">{html.escape(m.group(0))}</span>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _segment_html(segment: Mapping[str, Any]) -> str:
    text = str(segment.get("text", ""))
    if segment.get("author") == "model":
        return _model_html(text)
    kind = "information" if text.strip().startswith("<") else "hint"  # an inserted block, else the invalid-action hint
    return f'<span class="{kind}">{html.escape(text.strip())}</span>'


def _card(record: Mapping[str, Any]) -> str:
    e = html.escape
    status = _status(record)
    searches = int(record.get("num_searches", 0))
    attrs = {
        "status": status,
        "searches": str(min(searches, 3)),
        "dataset": str(record.get("dataset", "")),
        "method": str(record.get("method", "")),
        "retriever": str(record.get("retriever", "")),
    }
    data = " ".join(f'data-{k}="{e(v)}"' for k, v in attrs.items())
    parts = ", ".join(f"{e(str(k))}={v:g}" for k, v in (record.get("reward_parts") or {}).items())
    prediction = record.get("prediction")
    response = "".join(_segment_html(s) for s in record.get("segments", []))
    sample = f" · sample {int(record['sample'])}" if record.get("sample") else ""  # draws after the first
    return (
        f'<div class="card {status}" {data}>'
        f'<div class="meta">{e(str(record.get("dataset")))} · {e(str(record.get("id")))}{sample} · '
        f"{e(str(record.get('policy')))} / {e(str(record.get('method')))} / {e(str(record.get('retriever')))} · "
        f"{searches} searches · {int(record.get('num_invalid', 0))} invalid · {status}</div>"
        f'<div class="q">{e(str(record.get("question", "")))}</div>'
        f'<div>gold: <span class="gold">{e(" | ".join(map(str, record.get("golden_answers", []))))}</span> · '
        f'prediction: <span class="pred">{e(str(prediction)) if prediction is not None else "<i>none</i>"}</span>'
        f" · reward {float(record.get('reward', 0.0)):g}</div>"
        f'<div class="parts">{parts}</div>'
        f'<div class="resp">{response}</div></div>'
    )


def _select(key: str, label: str, values: Sequence[str]) -> str:
    options = '<option value="all">all</option>' + "".join(
        f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values
    )
    return f'<label>{label} <select id="f-{key}">{options}</select></label>'


def _summary(records: Sequence[Mapping[str, Any]]) -> str:
    """One table per (answer, searches) filter choice, each the summary of the episodes that choice shows; the
    rows carry their dataset, method and retriever for the other three filters."""
    tables = []
    for status in ("all", "correct", "wrong", "noanswer"):
        for searches in ("all", "0", "1", "2", "3"):
            chosen = [
                r
                for r in records
                if status in ("all", _status(r)) and searches in ("all", str(min(int(r.get("num_searches", 0)), 3)))
            ]
            hidden = "" if status == searches == "all" else " hidden"
            attributes = f'class="summary" data-status="{status}" data-searches="{searches}"{hidden}'
            tables.append(f"<table {attributes}>{_summary_rows(chosen)}</table>")
    return "".join(tables)


def _summary_rows(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return "<tr><td>no episode is shown</td></tr>"
    rows = summarize(records)
    keys = shown_metrics(rows)
    names = ["policy", "method", "retriever", "dataset", *(h for _, h, _ in keys)]
    out = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in names) + "</tr>"]
    for r in rows:
        cells = [r["policy"], r["method"], r["retriever"], r["dataset"]]
        cells += [format_value(r[k], d) for k, _, d in keys]
        data = " ".join(f'data-{k}="{html.escape(str(r[k]))}"' for k in ("dataset", "method", "retriever"))
        out.append(f"<tr {data}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return "".join(out)


def render_html(records: Sequence[Mapping[str, Any]], title: str = "searchenv transcripts") -> str:
    """The whole viewer page as one string."""

    def values(key: str) -> list[str]:
        return sorted({str(r.get(key, "")) for r in records})

    filters = " ".join(
        [
            _select("status", "answer", ["correct", "wrong", "noanswer"]),
            _select("searches", "searches", ["0", "1", "2", "3"]).replace(">3<", ">3+<"),
            _select("dataset", "dataset", values("dataset")),
            _select("method", "method", values("method")),
            _select("retriever", "retriever", values("retriever")),
        ]
    )
    cards = "\n".join(_card(r) for r in records)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body><header><h1>{html.escape(title)}</h1>{_summary(records)}"
        f'<div class="filters">{filters} <b><span id="shown">{len(records)}</span></b> of {len(records)} shown</div>'
        f"</header><main>{cards}</main><script>{_JS}</script></body></html>\n"
    )


def write_viewer(transcripts: str | Path, output: str | Path) -> Path:
    records = load_transcripts(transcripts)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_html(records, title=f"searchenv transcripts: {Path(transcripts).name}"), encoding="utf-8")
    return output

"""The new variables through the command line: `searchenv study` and `searchenv eval` accept the degraded and
simulated engines (``--retriever-option``) and the judge reward (a spec file), one argument each. A loopback
stand-in speaking OpenAI's wire format plays the policy, the judge and the simulated engine."""

from __future__ import annotations

import csv
import json
import re

from servers import openai_chat_app, serve_in_thread

from searchenv.cli.main import main


def _stand_in(prompt: str) -> str:
    if prompt.startswith("You grade answers"):
        return "yes"
    if prompt.startswith("You are a web search engine"):
        golds = re.findall(r'"([^"]+)"', prompt.split("answer is", 1)[1]) if "answer is" in prompt else []
        return f"A passage. The answer is {' or '.join(golds) or 'unknown'}."
    return "<answer> somebody </answer>"  # the policy


def _rows(path) -> dict:
    return {(r["engine"], int(r["k"])): float(r["recall"]) for r in csv.DictReader(path.open())}


def test_study_takes_degraded_and_simulated_engines(tmp_path) -> None:
    with serve_in_thread(openai_chat_app(_stand_in)) as url:
        args = ["study", "--dataset", "world", "--limit", "12", "--k", "3", "--latency-queries", "1"]
        args += ["--retrievers", "bm25,distractor,empty,simulated", "--output", str(tmp_path / "out")]
        args += ["--index-root", str(tmp_path / "idx"), "--retriever-option", "base=bm25"]
        args += ["--retriever-option", f"url={url}", "--retriever-option", "model=writer"]
        assert main(args) == 0
    recall = _rows(tmp_path / "out" / "study.csv")
    assert recall["bm25", 3] > 0.3
    assert recall["distractor", 3] == 0.0 and recall["empty", 3] == 0.0  # the golds reach the distractor
    assert recall["simulated", 3] == 1.0  # useful documents state the gold (p_noisy = 0)


def test_eval_takes_a_simulated_engine_and_the_judge_reward(tmp_path) -> None:
    with serve_in_thread(openai_chat_app(_stand_in)) as url:
        spec = tmp_path / "judge.yaml"
        spec.write_text(json.dumps({"base": "judge", "url": url, "model": "judge", "retries": 0}))
        out = tmp_path / "run"
        args = ["eval", "--policy", "endpoint", "--endpoint", url, "--endpoint-mode", "chat", "--model", "m=m"]
        args += ["--datasets", "world", "--limit", "2", "--no-agent", "--baselines", "rag", "--no-plot"]
        args += ["--retrievers", "simulated", "--retriever-option", f"url={url}", "--retriever-option", "model=w"]
        args += ["--reward", str(spec), "--output", str(out)]
        assert main(args) == 0
    records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["retriever"] == "simulated" and r["num_searches"] == 1 for r in records)
    assert all(r["reward"] == 1.0 and r["reward_parts"]["judge"] == 1.0 for r in records)  # the judge said yes
    assert all(r["reward_parts"]["judge_fallback"] == 0.0 and r["em"] == 0.0 for r in records)
    assert all(r["think_words"] == 0.0 and r["answer_words"] == 1.0 for r in records)
    assert "search rate" in (out / "report.md").read_text()


def test_audit_reward_takes_the_judge_as_reward_options_or_a_spec_file(capsys, tmp_path) -> None:
    spec = tmp_path / "judge.json"
    with serve_in_thread(openai_chat_app(lambda prompt: "no")) as url:
        args = ["audit-reward", "judge", "--limit", "2", "--reward-option", f"url={url}"]
        assert main([*args, "--reward-option", "model=judge", "--reward-option", "retries=0"]) == 0
        out = capsys.readouterr().out
        spec.write_text(json.dumps({"base": "judge", "url": url, "model": "judge", "retries": 0}))
        assert main(["audit-reward", str(spec), "--limit", "2"]) == 0
        from_file = capsys.readouterr().out
    assert "reward `judge`" in out and "| oracle |" in out and "judge fallbacks" in out
    assert "no hack earns more" in out  # a judge that always says no pays nothing
    assert "judge fallbacks" in from_file and "| oracle | searches the question, answers the gold | 0.000" in from_file
    assert main(["audit-reward", "judge", "--limit", "2"]) != 0  # no judge given: refused, naming 'model'
    assert "needs 'model'" in capsys.readouterr().err

"""``searchenv eval``'s ``rag_trained`` method and its pass@k samples, played by a scripted text policy (no model):
what each method shows the policy, which actions the harness writes, how samples are seeded, kept and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchenv.cli.main import main
from searchenv.data.world.generator import default_world
from searchenv.evaluation import suite
from searchenv.evaluation.policies import EndpointPolicy
from searchenv.evaluation.report import markdown_report, summarize
from searchenv.evaluation.runner import sample_seed
from searchenv.llm.client import Completion
from searchenv.sampling import SamplingConfig

GOLDS = {q.question: q.golden_answers[0] for q in default_world().dataset("test")}
BASE = ["eval", "--datasets", "world", "--limit", "3", "--max-turns", "3", "--no-plot", "--device", "cpu"]


class ScriptedPolicy:
    """Answers at once: the gold when reseeded away from the run's seed (every draw but the first is right), else
    "wrong". Records every context it was given, with the seed it drew from."""

    name = "scripted"

    def __init__(self, seed: int = 0, seen: list | None = None, run_seed: int | None = None):
        self.seed, self.run_seed = seed, seed if run_seed is None else run_seed
        self.seen = [] if seen is None else seen

    def with_seed(self, seed: int) -> ScriptedPolicy:
        return ScriptedPolicy(seed, self.seen, self.run_seed)

    def generate(self, contexts, stop):
        out = []
        for context in contexts:
            self.seen.append((self.seed, context))
            gold = next(g for q, g in GOLDS.items() if q in context.prompt)
            out.append(Completion(f"<answer> {gold if self.seed != self.run_seed else 'wrong'} </answer>", 3, "stop"))
        return out


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "transcripts.jsonl").read_text().splitlines()]


@pytest.fixture
def scripted(monkeypatch):
    """The policy every run of the test plays, seeded from the command line's --seed as a real one is."""
    policy = ScriptedPolicy()

    def build(args, *_):
        policy.seed = policy.run_seed = args.seed
        return policy

    monkeypatch.setattr(suite, "_policy", build)
    return policy


def test_rag_trained_keeps_the_agents_prompt_and_forces_one_search_with_the_question(scripted, tmp_path):
    out = tmp_path / "run"
    assert main([*BASE, "--baselines", "rag,rag_trained", "--output", str(out)]) == 0
    records = {(r["method"], r["id"]): r for r in _records(out)}
    for (method, question_id), record in records.items():
        if method == "agent":
            continue
        agent = records[("agent", question_id)]
        question = record["question"]
        assert (record["prompt"] == agent["prompt"]) is (method == "rag_trained")  # rag: a RAG instruction
        forced, shown, answer = record["segments"][:3]
        assert forced["text"] == f"<search> {question} </search>"  # the harness's action, before the policy's
        assert shown["author"] == "env" and "<information>" in shown["text"]
        assert answer["author"] == "model" and record["num_searches"] == 1 and record["num_actions"] == 2
    # the policy's one turn of rag_trained saw the agent's prompt with the passages already in the response
    agent_prompts = {r["prompt"] for r in records.values() if r["method"] == "agent"}
    after_passages = [c for _, c in scripted.seen if "<information>" in c.response and c.prompt in agent_prompts]
    assert len(after_passages) == 3


def test_rag_trained_has_a_budget_of_the_search_and_one_answer():
    from searchenv.evaluation.baselines import forced_first_action, method_budget, method_protocol
    from searchenv.protocol import get_protocol

    protocol = get_protocol("search-r1")
    assert method_protocol("rag_trained", protocol) is protocol
    assert method_protocol("rag", protocol).prompt_template != protocol.prompt_template
    assert method_budget("rag_trained", 4) == 2
    assert forced_first_action("rag_trained", protocol, "Who?") == "<search> Who? </search>"


def test_samples_are_drawn_with_derived_seeds_and_reported_as_pass_at_k(scripted, tmp_path):
    out = tmp_path / "run"
    args = [*BASE, "--temperature", "1", "--seed", "5", "--output", str(out)]
    assert main([*args, "--samples", "3"]) == 0
    records = _records(out)
    ids = sorted({r["id"] for r in records})
    assert len(ids) == 3 and sorted((r["id"], r["sample"]) for r in records) == [(i, s) for i in ids for s in range(3)]
    assert {s for s, _ in scripted.seen} == {5, sample_seed(5, 1), sample_seed(5, 2)}
    [row] = summarize(records)
    assert (row["n"], row["samples"], row["em"], row["pass_at_k"]) == (9, 3, pytest.approx(2 / 3), 1.0)
    report = (out / "report.md").read_text()
    assert "pass@k (any sample right)" in report and "| 3 | 1.000 |" in report
    from searchenv.evaluation.viewer import render_html

    page = render_html(records)
    assert "<th>pass@k (any sample right)</th>" in page and " · sample 2 · " in page
    # one more sample later plays only the new draw: the earlier ones are kept
    scripted.seen.clear()
    assert main([*args, "--samples", "4"]) == 0
    assert {s for s, _ in scripted.seen} == {sample_seed(5, 3)} and len(_records(out)) == 12


def test_one_sample_per_question_reports_no_pass_at_k():
    records = [{"policy": "p", "method": "agent", "retriever": "bm25", "dataset": "world", "id": str(i), "em": 1.0,
                "f1": 1.0, "cem": 1.0, "retrieval_hit": None, "num_searches": 0, "num_invalid": 0,
                "response_tokens": 3, "end_reason": "answer"} for i in range(2)]  # fmt: skip
    [row] = summarize(records)
    assert (row["samples"], row["pass_at_k"]) == (None, None)
    assert "pass@k" not in markdown_report([row])
    from searchenv.evaluation.viewer import render_html

    assert "pass@k" not in render_html(records) and "sample" not in render_html(records)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--samples", "3"], "--temperature 0 is greedy and would play 3 identical ones; pass --temperature 1"),
        (["--samples", "0", "--temperature", "1"], "--samples must be at least 1, got 0"),
    ],
)
def test_bad_sample_counts_are_refused_before_anything_loads(argv, message, tmp_path, capsys):
    assert main([*BASE, *argv, "--output", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o" / "transcripts.jsonl").exists()


def test_sample_seeds_keep_draw_zero_and_differ_between_draws_and_runs():
    assert sample_seed(7, 0) == 7
    seeds = {sample_seed(run, draw) for run in range(4) for draw in range(1, 9)}
    assert len(seeds) == 32


def test_an_endpoint_policy_reseeded_sends_the_new_seed_and_leaves_the_original():
    policy = EndpointPolicy("http://127.0.0.1:9", "m", SamplingConfig(temperature=1.0, seed=3))
    other = policy.with_seed(11)
    assert other.client.request_body("q")[1]["seed"] == 11 and other.seed == 11
    assert policy.client.request_body("q")[1]["seed"] == 3 and policy.seed == 3


def test_a_reward_the_dataset_cannot_feed_is_refused_before_anything_loads(scripted, tmp_path, capsys):
    rows = tmp_path / "flat.jsonl"
    rows.write_text(json.dumps({"id": "f1", "question": "Who?", "golden_answers": ["x"]}) + "\n")
    args = ["eval", "--datasets", str(rows), "--retrievers", "random", "--corpus", str(tmp_path / "none.jsonl")]
    assert main([*args, "--reward", "hop-credit", "--output", str(tmp_path / "o"), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "reward 'hop-credit' needs" in err and "question 'f1' of dataset 'flat'" in err
    assert scripted.seen == []

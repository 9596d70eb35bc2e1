"""``searchenv eval`` with real parts: SmolLM2-135M through transformers, a real ``transformers serve`` on loopback,
BM25 over the generated world and the real QA files in ../shared/data."""

from __future__ import annotations

import csv
import json
import shutil
import socket
from pathlib import Path

import pytest

from searchenv.cli.main import main
from searchenv.evaluation import suite
from searchenv.evaluation.checkpoint import RUN_FILE, read_run_settings, replay_settings
from searchenv.evaluation.evalset import build_eval_set, write_eval_set
from searchenv.evaluation.policies import Context, EndpointPolicy, LocalPolicy, PolicyError
from searchenv.evaluation.runner import TranscriptStore, exclusive_output
from searchenv.sampling import SamplingConfig

TINY = ["--datasets", "world", "--limit", "2", "--max-new-tokens", "8", "--max-turns", "2", "--batch-size", "2"]
TINY += ["--protocol", "search-r1-fewshot", "--chat-template", "off", "--no-plot"]


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "transcripts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def local_policy(smollm2_dir):
    from searchenv.rollout import load_policy

    model, tokenizer = load_policy(str(smollm2_dir))
    return LocalPolicy(model, tokenizer, SamplingConfig.greedy(max_new_tokens=12), chat_template=False, name="smollm2")


def test_local_policy_stops_at_a_stop_string(local_policy):
    tokenizer = local_policy.tokenizer
    example = "Question: Who founded Orvane Abbey?\n<answer> Tesk Mallor </answer>\n\nQuestion: Capital of France?\n"
    ids = tokenizer(example + "<answer>")["input_ids"]
    [turn] = local_policy.generator.generate([ids], ["</answer>", "</search>"], [12])
    assert tokenizer.decode(turn.token_ids).rstrip().endswith("</answer>")
    assert 0 < len(turn.token_ids) <= 12 and len(turn.logprobs) == len(turn.token_ids)


def test_a_local_policy_reseeded_shares_its_model_and_draws_from_the_new_seed(local_policy):
    other = local_policy.with_seed(9)
    assert (other.seed, local_policy.seed) == (9, 0)  # the runner seeds torch with policy.seed per batch
    assert other.generator is local_policy.generator and other.tokenizer is local_policy.tokenizer


def test_an_episode_longer_than_the_model_window_ends_as_cut(local_policy):
    from searchenv.rollout import EpisodeDriver, make_envs

    long_question = [{"id": "q", "question": "x " * 9000, "golden_answers": ["a"]}]  # past SmolLM2's 8192 tokens
    envs = make_envs(1, dataset=long_question, retriever=HostileRetriever(), reward="em")
    driver = EpisodeDriver(envs, local_policy.tokenizer, local_policy.sampling)
    driver.start([0])
    assert driver.requests() == [] and not driver.running  # nothing is sampled: no room left in the window
    [result] = driver.results()
    assert result.info["end_reason"] == "context_limit" and result.tokens.num_model_tokens == 0


def test_eval_plays_a_local_model_on_the_training_token_path(local_policy):
    """A retrieved special-token string (SmolLM2's ``<file_sep>``) stays characters in training; the evaluation of a
    local checkpoint must read the same ids (it re-encoded the whole response text before, which made it the
    special token)."""
    from searchenv.evaluation.runner import Cell, _make_envs, _play_batch
    from searchenv.rollout import EpisodeDriver, HFGenerator
    from searchenv.types import QAExample

    class RecordingEngine(HFGenerator):
        contexts: list[list[int]] = []

        def generate(self, contexts, stop_strings, max_new_tokens, on_tokens=None):
            self.contexts.extend(list(c) for c in contexts)
            return super().generate(contexts, stop_strings, max_new_tokens, on_tokens)

    example = QAExample("q0", "Who founded Orvane Abbey?", ("Tesk Mallor",))
    settings = {"protocol": "search-r1-fewshot", "reward": "em", "topk": 1, "max_turns": 2, "budget": "actions"}
    cell = Cell("smol", "rag", "hostile", "toy", [("q0", example)], {**settings, "max_information_words": 40})
    engine = RecordingEngine(local_policy.generator.engine.model, local_policy.tokenizer, local_policy.sampling)
    policy = type("P", (), {"name": "smol", "tokenizer": local_policy.tokenizer, "seed": 0})()
    policy.sampling, policy.generator = local_policy.sampling, engine
    envs = _make_envs(cell, HostileRetriever(), 1)
    _play_batch(envs, policy, cell, [0])
    special = local_policy.tokenizer.convert_tokens_to_ids("<file_sep>")
    [context] = engine.contexts  # RAG: one model turn, after the harness's retrieval
    assert special not in context  # the passage's <file_sep> is characters, as in training
    # and the context is exactly what the training driver builds for the same episode
    replay = EpisodeDriver(_make_envs(cell, HostileRetriever(), 1), local_policy.tokenizer, local_policy.sampling)
    replay.start([0])
    replay.force(["<search> Who founded Orvane Abbey? </search>"])
    assert [r.context_ids for r in replay.requests()] == [context]


class HostileRetriever:
    """Every search finds one passage that holds a special-token string of SmolLM2's vocabulary."""

    name = "hostile"

    def search(self, queries, k):
        from searchenv.types import Passage

        text = "Orvane <file_sep> Abbey was founded by Tesk Mallor."
        return [[Passage("p1", "Orvane Abbey", text)] for _ in queries]


def test_a_local_model_reports_its_tokens_while_a_turn_runs(local_policy):
    seen: list[int] = []
    local_policy.on_tokens = seen.append
    tokenizer = local_policy.tokenizer
    try:
        ids = [tokenizer("Say hi")["input_ids"], tokenizer("Count: one two")["input_ids"]]
        out = local_policy.generator.generate(ids, ["</answer>"], [12, 12])
    finally:
        local_policy.on_tokens = None
    assert len(seen) > 1  # one report per decoding step, not one per turn
    assert sum(seen) >= sum(len(t.token_ids) for t in out) > 0  # rows that stopped early are not counted after it


def test_progress_moves_by_turns_and_tokens_before_an_episode_finishes(monkeypatch):
    import io

    from searchenv.evaluation import progress as progress_module

    monkeypatch.setattr(progress_module, "REFRESH_SECONDS", 0)
    screen = io.StringIO()
    shown = progress_module.EvalProgress(total_episodes=2, file=screen)
    shown.tokens_streamed(3)
    shown.tokens_streamed(4)
    assert "model: 7tok" in screen.getvalue() and "0/2" in screen.getvalue()
    shown.turn_done([5, 1])  # the policy's exact counts replace the live estimate
    assert "model: 6tok" in screen.getvalue() and "2 turns" in screen.getvalue()
    shown.episodes_done(2)
    shown.close()
    assert "2/2" in screen.getvalue()


@pytest.mark.parametrize(
    ("argv", "limit", "max_new_tokens", "note"),
    [
        (["--device", "cpu"], 20, 128, "--max-new-tokens 128 --max-total-tokens 2048 --limit 20"),
        (["--device", "cpu", "--limit", "all", "--max-new-tokens", "64"], None, 128, "--max-total-tokens 2048"),
        (["--device", "cuda"], None, 500, None),
        (["--policy", "endpoint", "--limit", "7"], 7, 500, None),
    ],
)
def test_cpu_defaults_apply_only_to_a_local_model_on_a_cpu(argv, limit, max_new_tokens, note, capsys):
    from searchenv.cli.main import build_parser

    args = build_parser(["eval"]).parse_args(["eval", *argv])
    defaults, resolved_limit = suite._device_defaults(args)
    assert resolved_limit == limit and defaults["max_new_tokens"] == max_new_tokens
    assert defaults["max_total_tokens"] == (2048 if "cpu" in argv else 4096)
    err = capsys.readouterr().err
    assert (f"the CPU defaults apply: {note} (" in err) if note else err == ""
    # what the episodes use: the command line, else these defaults
    assert suite._sampling(args, defaults).max_new_tokens == (64 if "64" in argv else max_new_tokens)


@pytest.mark.slow
def test_tiny_cpu_eval_shows_progress_before_its_first_episode_finishes(smollm2_dir, tmp_path, monkeypatch, capsys):
    from searchenv.evaluation import progress as progress_module

    monkeypatch.setattr(progress_module, "REFRESH_SECONDS", 0)  # draw every update, so the order can be read
    args = ["eval", "--model", str(smollm2_dir), *TINY, "--limit", "1", "--device", "cpu", "--output", str(tmp_path)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "the CPU defaults apply: --max-total-tokens 2048" in err  # what the command line left unset
    first_token = next(i for i, line in enumerate(err.split("\r")) if "model: " in line and "model: 0tok" not in line)
    finished = next(i for i, line in enumerate(err.split("\r")) if "episodes: 100%" in line)
    assert first_token < finished  # the model's tokens showed before the episode was done
    assert len(_records(tmp_path)) == 1


@pytest.mark.slow
def test_eval_end_to_end_with_baselines(smollm2_dir, tmp_path):
    out = tmp_path / "run"
    args = ["eval", "--model", f"smol={smollm2_dir}", *TINY, "--baselines", "direct,rag", "--output", str(out)]
    assert main(args) == 0
    records = _records(out)
    assert sorted(r["method"] for r in records) == ["agent", "agent", "direct", "direct", "rag", "rag"]
    for r in records:
        assert r["policy"] == "smol" and r["retriever"] == "bm25" and r["dataset"] == "world"
        assert r["settings"]["protocol"] == "search-r1-fewshot" and r["settings"]["max_turns"] == 2
        assert r["response_tokens"] > 0
    direct = [r for r in records if r["method"] == "direct"]
    rag = [r for r in records if r["method"] == "rag"]
    assert all(r["num_searches"] == 0 and r["retrieval_hit"] is None and r["num_actions"] == 1 for r in direct)
    assert all(r["num_searches"] == 1 and len(r["retrieved"]) == 1 and r["retrieval_hit"] in (0.0, 1.0) for r in rag)
    report = (out / "report.md").read_text()
    assert "study Table 4 layout" in report and "| smol | rag | bm25 |" in report
    assert (out / "metrics.csv").read_text().count("\n") == 4  # header + 3 methods


@pytest.mark.slow
def test_interrupted_eval_resumes_without_losing_or_redoing_episodes(smollm2_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    args = ["eval", "--model", str(smollm2_dir), *TINY, "--limit", "3", "--batch-size", "1", "--no-agent"]
    args += ["--baselines", "direct", "--output", str(out)]
    real_policy = suite._policy
    calls = {"n": 0}

    class Interrupting:
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

            self.tokenizer, self.sampling, self.seed = inner.tokenizer, inner.sampling, inner.seed
            self.generator = self

        def generate(self, contexts, stop, caps):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt  # Ctrl-C during the second episode
            return self.inner.generator.generate(contexts, stop, caps)

    monkeypatch.setattr(suite, "_policy", lambda *a: Interrupting(real_policy(*a)))
    assert main(args) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err
    first = _records(out)
    assert len(first) == 1
    with (out / "transcripts.jsonl").open("a") as handle:  # a kill -9 in the middle of writing a line
        handle.write('{"policy": "smollm2-135m", "meth')
    monkeypatch.setattr(suite, "_policy", real_policy)
    assert main(args) == 0
    assert "removed an unfinished last line" in capsys.readouterr().out
    records = _records(out)
    assert len(records) == 3 and records[0] == first[0]
    assert len({r["id"] for r in records}) == 3
    assert main(args + ["--max-new-tokens", "9"]) == 2  # other settings must not mix into the same file
    assert "already holds" in capsys.readouterr().err
    (out / "report.md").unlink()
    assert main(["eval", "--output", str(out), "--report-only", "--no-plot"]) == 0
    assert "| smollm2-135m | direct | bm25 | world | 3 |" in (out / "report.md").read_text()


def test_bad_inputs_get_clear_errors_before_any_model_loads(tmp_path, capsys):
    base = ["eval", "--output", str(tmp_path / "o"), "--no-plot"]
    assert main(base + ["--datasets", "no_such_set"]) == 2
    assert "neither a file nor a known name" in capsys.readouterr().err
    assert main(base + ["--baselines", "cot"]) == 2
    assert "--baselines takes a comma list of direct,rag" in capsys.readouterr().err
    assert main(base + ["--retrievers", "bm26"]) == 2
    assert "unknown retriever 'bm26'" in capsys.readouterr().err
    assert main(base + ["--datasets", "nq_test.jsonl"]) == 2  # a missing file
    assert "nq_test.jsonl" in capsys.readouterr().err
    bad = tmp_path / "o" / "transcripts.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"x": 1}\n{"policy": "p"}\n')
    assert main(base + ["--limit", "1"]) == 2
    assert "transcripts.jsonl:1: not a transcript record" in capsys.readouterr().err
    held = tmp_path / "held"
    with exclusive_output(held):  # another run writing there
        assert main(["eval", "--output", str(held), "--no-plot", "--limit", "1"]) == 2
    assert "another searchenv eval is writing to" in capsys.readouterr().err


def test_dead_endpoint_fails_fast_with_the_url(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["eval", "--policy", "endpoint", "--endpoint", f"http://127.0.0.1:{port}", "--model", "m", "--retries", "1"]
    assert main(args + ["--output", str(tmp_path), "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port} did not answer after 2 tries" in err and "ConnectError" in err
    assert not (tmp_path / "transcripts.jsonl").exists()


def test_checkpoint_settings_are_replayed_and_overrides_reported(tmp_path):
    (tmp_path / RUN_FILE).write_text(
        json.dumps({"protocol": "search-r1-fewshot", "chat_template": False, "max_turns": 3, "retriever": "e5-exact"})
    )
    trained = read_run_settings(tmp_path)
    settings, mismatches = replay_settings(trained, {"max_turns": 5, "topk": None}, suite.DEFAULTS)
    assert settings["protocol"] == "search-r1-fewshot" and settings["chat_template"] is False
    assert settings["max_turns"] == 5 and settings["topk"] == 3
    assert [str(m) for m in mismatches] == ["max_turns: trained with 3, evaluated with 5"]
    # the command line's words for a chat template match the booleans a run file records
    assert replay_settings(trained, {"chat_template": "off"}, suite.DEFAULTS)[1] == []
    assert [str(m) for m in replay_settings(trained, {"chat_template": "on"}, suite.DEFAULTS)[1]] == [
        "chat_template: trained with False, evaluated with 'on'"
    ]
    # the built-in loop's token budget sits in its config; it is replayed too (32 tokens per turn, not 500)
    config = {"max_new_tokens": 32, "max_total_tokens": 512, "lr": 3e-5}
    (tmp_path / RUN_FILE).write_text(json.dumps({"protocol": "search-r1-fewshot", "config": config}))
    settings, mismatches = replay_settings(read_run_settings(tmp_path), {"max_total_tokens": 1024}, suite.DEFAULTS)
    assert (settings["max_new_tokens"], settings["max_total_tokens"]) == (32, 1024)
    assert [str(m) for m in mismatches] == ["max_total_tokens: trained with 512, evaluated with 1024"]
    (tmp_path / RUN_FILE).write_text("{oops")
    with pytest.raises(ValueError, match="searchenv_run.json: not valid JSON"):
        read_run_settings(tmp_path)


def test_retriever_options_reach_only_the_engines_that_take_them(tmp_path, capsys):
    pairs = [("encoder", "minilm"), ("k1", 0.9), ("index_dir", "idx"), ("cache", False)]
    from searchenv.retrievers import route_options

    routed = route_options(["bm25", "e5-exact", "random"], pairs)
    assert routed == {
        "bm25": {"k1": 0.9, "index_dir": "idx"},
        "e5-exact": {"encoder": "minilm", "index_dir": "idx", "cache": False},
        "random": {},
    }
    base = ["eval", "--output", str(tmp_path / "o"), "--no-plot", "--retrievers", "bm25,e5-exact"]
    assert main(base + ["--retriever-option", "encodr=minilm"]) == 2  # taken by neither: an error, not dropped
    err = capsys.readouterr().err
    assert "none of the retrievers bm25, e5-exact takes 'encodr'" in err and "did you mean 'encoder'" in err
    assert main(base + ["--retriever-option", "k1=high"]) == 2  # the engine that takes it checks its type
    assert "option 'k1' must be float" in capsys.readouterr().err


@pytest.mark.slow
def test_bm25_and_a_dense_engine_in_one_run(smollm2_dir, shared_data, tmp_path):
    """The user's BM25-vs-dense comparison: the encoder option reaches the dense engine only."""
    rows = (shared_data / "corpus" / "hotpotqa_hipporag.jsonl").read_text().splitlines()[:40]
    (tmp_path / "corpus.jsonl").write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    args = ["eval", "--model", f"smol={smollm2_dir}", *TINY, "--no-agent", "--baselines", "rag"]
    args += ["--datasets", str(shared_data / "qa" / "hotpotqa_100.jsonl"), "--corpus", str(tmp_path / "corpus.jsonl")]
    args += ["--retrievers", "bm25,e5-exact", "--retriever-option", "encoder=minilm"]
    args += ["--retriever-option", "cache=false"]  # e5-exact's alone: embed in memory
    assert main(args + ["--output", str(out)]) == 0
    records = _records(out)
    assert sorted(r["retriever"] for r in records) == ["bm25", "bm25", "e5-exact", "e5-exact"]
    assert all(r["num_searches"] == 1 and len(r["retrieved"]) == 1 for r in records)
    report = (out / "report.md").read_text()
    assert "| smol | rag | bm25 | hotpotqa_100 |" in report and "| smol | rag | e5-exact | hotpotqa_100 |" in report


def test_plot_series_never_share_a_colour():
    pytest.importorskip("matplotlib")
    from searchenv.evaluation.report import series_colors

    for n in (1, 10, 12, 20, 31):  # 12 = two models x three methods x two engines
        assert len(set(series_colors(n))) == n


def test_mixed_eval_set_uses_dev_where_there_is_no_test(shared_data, tmp_path):
    from searchenv.data.datasets import load_dataset

    for name, split, source in (("nq", "test", "nq_test_1000"), ("hotpotqa", "dev", "hotpotqa_100")):
        (tmp_path / name).mkdir()
        shutil.copy(shared_data / "qa" / f"{source}.jsonl", tmp_path / name / f"{split}.jsonl")
    mixed = build_eval_set(["nq", "hotpotqa"], limit=5, seed=1, data_dir=tmp_path)
    assert [e.data_source for e in mixed] == ["nq"] * 5 + ["hotpotqa"] * 5
    assert mixed == build_eval_set(["nq", "hotpotqa"], limit=5, seed=1, data_dir=tmp_path)  # seeded
    jsonl, parquet = write_eval_set(mixed, tmp_path / "out")
    for path in (jsonl, parquet):
        back = load_dataset(str(path))
        assert [(e.question, e.golden_answers) for e in back] == [(e.question, e.golden_answers) for e in mixed]


@pytest.mark.slow
def test_endpoint_policy_against_transformers_serve(transformers_server, smollm2_dir, tmp_path):
    policy = EndpointPolicy(
        transformers_server, str(smollm2_dir), SamplingConfig.greedy(max_new_tokens=12), concurrency=2
    )
    example = "Question: Who founded Orvane Abbey?\n<answer> Tesk Mallor </answer>\n\nQuestion: Capital of France?\n"
    out = policy.generate([Context(example, "<answer>"), Context(example, "<answer>")], ["</answer>"])
    assert out[0] == out[1] and out[0].text.rstrip().endswith("</answer>") and out[0].num_tokens > 0
    with pytest.raises(PolicyError, match="rejected the request"):  # a 4xx is not retried
        EndpointPolicy(transformers_server, "no-such-model", SamplingConfig.greedy(max_new_tokens=2)).check()

    out_dir = tmp_path / "run"
    args = ["eval", "--policy", "endpoint", "--endpoint", transformers_server, "--model", f"served={smollm2_dir}"]
    args += [*TINY, "--baselines", "direct", "--output", str(out_dir), "--concurrency", "2"]
    args += ["--judge-url", transformers_server, "--judge-model", str(smollm2_dir)]
    assert main(args) == 0
    records = _records(out_dir)
    assert {r["method"] for r in records} == {"agent", "direct"} and len(records) == 4
    assert all(r["policy"] == "served" and r["response_tokens"] > 0 for r in records)
    assert all("judge" in r for r in records)
    store = TranscriptStore(out_dir / "transcripts.jsonl")
    assert len(store.records) == 4


@pytest.mark.slow
def test_failed_searches_are_not_results_and_are_redone_on_resume(smollm2_dir, tmp_path, monkeypatch, capsys):
    """Against a dead retriever, eval used to finish with exit 0, a report of zeros, and the failed episodes stored as
    finished, so the rerun after the fix skipped them and kept the zeros."""
    out = tmp_path / "run"
    args = ["eval", "--model", f"smol={smollm2_dir}", *TINY, "--no-agent", "--baselines", "rag"]
    args += ["--retrievers", "toyworld:switchable_retriever", "--output", str(out)]
    monkeypatch.setenv("TOYWORLD_RETRIEVER_DOWN", "1")
    assert main(args) == 1
    assert "2 of 2 episodes had a search the retriever could not serve" in capsys.readouterr().err
    assert [r["num_failed_searches"] for r in _records(out)] == [1, 1]
    (row,) = list(csv.DictReader((out / "metrics.csv").open()))
    assert (row["n"], row["failed"]) == ("0", "2")  # no zeros reported as EM
    monkeypatch.setenv("TOYWORLD_RETRIEVER_DOWN", "0")
    assert main(args) == 0
    latest = {r["id"]: r for r in _records(out)}  # the rerun appended fresh records for both episodes
    assert len(_records(out)) == 4 and all(r["num_failed_searches"] == 0 for r in latest.values())
    (row,) = list(csv.DictReader((out / "metrics.csv").open()))
    assert (row["n"], row["failed"]) == ("2", "0")

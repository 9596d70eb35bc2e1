"""The one ``"module:attr"`` resolver: what it returns, and errors that say which part is wrong."""

from __future__ import annotations

import pytest

from searchenv.imports import check_reference, is_reference, load_attr
from searchenv.retrievers import check_retriever_options, make_retriever


def test_load_attr_returns_the_named_object_including_dotted_attributes():
    from searchenv.corpus import Corpus

    assert load_attr("searchenv.corpus:Corpus") is Corpus
    assert load_attr("searchenv.corpus:Corpus.from_jsonl") == Corpus.from_jsonl


@pytest.mark.parametrize(
    ("reference", "error", "message"),
    [
        ("searchenv.corpus", ValueError, "must be 'package.module:attr'"),
        ("searchenv.corpus:", ValueError, "must be 'package.module:attr'"),
        ("no_such_module_xyz:make", ImportError, "cannot import module 'no_such_module_xyz'"),
        ("searchenv.corpus:NoSuchThing", ImportError, "has no attribute 'NoSuchThing'"),
    ],
)
def test_load_attr_names_what_is_wrong(reference, error, message):
    with pytest.raises(error, match=message):
        load_attr(reference, "retriever factory")


def test_check_reference_finds_the_module_without_importing_it():
    check_reference("searchenv.retrievers.random_retriever:RandomRetriever")
    with pytest.raises(ValueError, match="no module 'no_such_pkg_xyz.engines' is importable"):
        check_reference("no_such_pkg_xyz.engines:make")
    assert is_reference("pkg.mod:f") and not is_reference("http://127.0.0.1:8000") and not is_reference("bm25")


def test_retrievers_resolve_factory_references_through_it(tmp_path):
    from searchenv.corpus import Corpus

    corpus_file = tmp_path / "corpus.jsonl"
    corpus_file.write_text('{"id": "1", "contents": "a"}\n{"id": "2", "contents": "b"}\n')
    retriever = make_retriever(
        "searchenv.retrievers.random_retriever:RandomRetriever", Corpus.from_jsonl(corpus_file), seed=1
    )
    assert len(retriever.search(["q"], 1)[0]) == 1
    with pytest.raises(ValueError, match="retriever factory 'no_such_pkg_xyz:f': no module"):
        check_retriever_options("no_such_pkg_xyz:f", {})


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("searchenv.adapters.rows", "main", "searchenv.cli.verl_data:main"),
        ("searchenv.retrievers.server.command", "config_from_args", "searchenv.cli.serve:config_from_args"),
        ("searchenv.evaluation.cli", "add_evaluation_parsers", "searchenv.cli.evaluation:add_evaluation_parsers"),
        ("searchenv.evaluation.suite", "add_eval_arguments", "searchenv.cli.evaluation:add_eval_arguments"),
        ("searchenv.retrievers.degraded.options", "WRAPPERS", "searchenv.retrievers:WRAPPERS"),
        ("searchenv.evaluation.prompter", "Prompter", "searchenv.llm.prompter:Prompter"),
        ("searchenv.evaluation.prompter", "PromptFailure", "searchenv.llm.prompter:PromptFailure"),
        ("searchenv.evaluation.prompter", "run_coroutine", "searchenv.llm.blocking:run_coroutine"),
        ("searchenv.evaluation.policies", "EvalSampling", "searchenv.sampling:SamplingConfig.greedy"),
        ("searchenv.evaluation", "EvalSampling", "searchenv.sampling:SamplingConfig.greedy"),
        ("searchenv.retrievers.http.retry", "RetrievalUnavailable", "searchenv.http.retry:RetrievalUnavailable"),
        ("searchenv.retrievers.http.retry", "parse_retry_after", "searchenv.http.retry:parse_retry_after"),
        ("searchenv.retrievers.web.record", "Record", "searchenv.answer_store:AnswerStore"),
        ("searchenv.retrievers.web.record", "NotRecorded", "searchenv.answer_store:NotRecorded"),
    ],
)
def test_moved_names_still_resolve_with_a_warning(old, name, new):
    import importlib

    module = importlib.import_module(old)
    with pytest.deprecated_call(match=f"{old}.{name} moved to"):
        assert getattr(module, name) == load_attr(new)  # a bound classmethod is a new object each time
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_scoring_exact_match_imports_nothing_from_the_application_layer():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from searchenv.reward_specs import Rollout, load_reward\n"
        "assert load_reward('em')(Rollout.from_text('<answer>Paris</answer>', ['Paris'])).reward == 1.0\n"
        "print(sorted(m for m in sys.modules if m.startswith(('searchenv.evaluation', 'searchenv.adapters'))))\n"
        "print(sorted(m for m in ('httpx', 'torch', 'transformers') if m in sys.modules))\n"
    )
    lines = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert lines.splitlines() == ["[]", "[]"]  # the reward layer sits below evaluation and adapters, and stays light

"""The one ``"module:attr"`` resolver: what it returns, and errors that say which part is wrong; the public names
listed once, no deprecated alias left, and library code that imports defining modules, not the façade."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

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
    ("old", "name"),
    [
        ("searchenv.adapters.rows", "main"),
        ("searchenv.adapters.rows", "write_datasets"),
        ("searchenv.retrievers.server.command", None),
        ("searchenv.evaluation.cli", None),
        ("searchenv.evaluation.suite", "add_eval_arguments"),
        ("searchenv.evaluation.suite", "retriever_options"),
        ("searchenv.retrievers.degraded.options", "WRAPPERS"),
        ("searchenv.evaluation.prompter", None),
        ("searchenv.evaluation.policies", "EvalSampling"),
        ("searchenv.evaluation", "EvalSampling"),
        ("searchenv.retrievers.http.retry", None),
        ("searchenv.retrievers.web.record", "Record"),
        ("searchenv.retrievers.bm25.native.build", None),
        ("searchenv.retrievers.bm25.native.search", None),
        ("searchenv.adapters.rollout.generation", None),
        ("searchenv.adapters.train_ppo", None),
        ("searchenv.adapters.train_trl", None),
        ("searchenv.adapters.skyrl_train", None),
        ("searchenv.adapters.verl_data", None),
        ("searchenv.cli.arguments", "add_index_path_argument"),
        ("searchenv.cli.serve", "run_checked"),
    ],
)
def test_no_deprecated_alias_outlives_0_2_0(old, name):
    """The re-layout release keeps no old address (CHANGELOG, 0.2.0 "Removed": each old name and its new home);
    an alias left behind would be a second name for one thing."""
    if name is None:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    else:
        assert not hasattr(importlib.import_module(old), name)


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


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    return {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_the_public_names_are_listed_once_and_each_resolves_where_it_is_listed():
    """``__all__`` is derived from the one table of lazy names; the TYPE_CHECKING block (for type checkers) names
    the same objects from the same modules, and each name is the object of the module the table names."""
    import searchenv

    table = searchenv._EXPORTS
    assert searchenv.__all__ == ["ENV_ID", "__version__", *table]
    tree = ast.parse(Path(searchenv.__file__).read_text(encoding="utf-8"))
    assert _type_checking_imports(tree) == table
    for name, module in table.items():
        assert getattr(searchenv, name) is getattr(importlib.import_module(module), name), name


REPO = Path(__file__).resolve().parents[1]


def test_library_code_imports_the_env_directly_not_through_the_lazy_facade():
    """Inside the package, ``import searchenv`` then ``searchenv.step_batch`` hides where a name lives (and goes
    through the lazy façade): library code imports the defining module (``searchenv.env.stepping``)."""
    offenders = []
    for root in ("searchenv", "retrievers", "reward_specs", "adapters"):
        for path in (REPO / root).rglob("*.py"):
            if path == REPO / "searchenv" / "__init__.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import) and any(alias.name == "searchenv" for alias in node.names):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} import searchenv")
                if isinstance(node, ast.ImportFrom) and node.module == "searchenv" and node.level == 0:
                    names = [alias.name for alias in node.names if alias.name != "__version__"]
                    offenders += [f"{path.relative_to(REPO)}:{node.lineno} from searchenv import {n}" for n in names]
    assert offenders == []

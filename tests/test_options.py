"""One home for command-line options: the groups of searchenv.cli.options, read by every command."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
from toyworld import QUESTIONS

from searchenv.cli.main import COMMANDS, build_parser
from searchenv.cli.options import add_retriever_arguments, retriever_options, retriever_options_by_engine
from searchenv.retrievers.catalogue import ENGINES

REPO = Path(__file__).resolve().parents[1]
LIBRARY = [REPO / "searchenv", REPO / "retrievers", REPO / "reward_specs", REPO / "adapters"]
# Command modules outside searchenv/cli that may read the shared groups: the trainers' parsers (kept beside their
# loops), and the `python -m` addresses that only hand over to the command line.
COMMAND_MODULES = {
    "adapters/openenv/serve.py",
    "adapters/ppo/train.py",
    "adapters/sft/train.py",
    "adapters/trl/train.py",
    "retrievers/server/__main__.py",
}


def _python_files() -> list[Path]:
    return [p for root in LIBRARY for p in root.rglob("*.py") if "__pycache__" not in p.parts]


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_library_modules_import_nothing_of_the_command_line():
    """Before, adapters/rows.py and evaluation/suite.py imported searchenv.cli (a library layer above the CLI)."""
    offenders = []
    for path in _python_files():
        relative = _relative(path)
        if relative.startswith("searchenv/cli/") or relative in COMMAND_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{relative}: {name}" for name in names if name.startswith("searchenv.cli")]
    assert offenders == []


def test_the_retriever_options_are_declared_by_one_function():
    """Before, five parsers declared --retriever, --encoder, --engine and --retriever-option, with other help."""
    flags = ("--retriever", "--retrievers", "--retriever-option", "--encoder", "--engine", "--index-dir", "--corpus")
    declared = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                spelt = [a.value for a in node.args if isinstance(a, ast.Constant)]
                declared += [f"{_relative(path)}: {flag}" for flag in spelt if flag in flags]
    assert {entry.split(":")[0] for entry in declared} == {"searchenv/cli/options.py"}


def _retriever_actions() -> dict[str, dict[str, argparse.Action]]:
    """Every command's retriever options: command → option string → action."""
    commands = next(a for a in build_parser(COMMANDS)._actions if isinstance(a, argparse._SubParsersAction))
    found: dict[str, dict[str, argparse.Action]] = {}
    for name, parser in commands.choices.items():
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in ("--retriever", "--retrievers", "--encoder", "--engine", "--index-path", "--index-dir"):
                    found.setdefault(name, {})[flag] = action
    return found


def test_every_command_lists_every_engine_and_explains_an_option_alike():
    actions = _retriever_actions()
    assert {"play", "demo", "serve", "mcp", "study", "eval", "audit-reward", "train-ppo"} <= set(actions)
    helps: dict[str, set[str]] = {}
    for command, options in actions.items():
        main = options.get("--retriever") or options["--retrievers"]
        missing = [name for name, record in ENGINES.items() if record.alias_of is None and name not in main.help]
        assert not missing, f"searchenv {command} --help does not list {missing}"
        for flag in ("--encoder", "--engine", "--index-path"):
            if flag in options:
                helps.setdefault(flag, set()).add(options[flag].help)
    assert all(len(texts) == 1 for texts in helps.values()), helps


def _parse(argv: list[str], **group: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_retriever_arguments(parser, **group)  # type: ignore[arg-type]
    return parser.parse_args(argv)


def test_one_engine_gets_its_flags_and_pairs_and_a_disagreement_is_refused():
    args = _parse(["--retriever", "bm25", "--engine", "bm25s", "--retriever-option", "k1=0.8"])
    assert retriever_options(args) == {"k1": 0.8, "engine": "bm25s"}
    with pytest.raises(ValueError, match="--engine and --retriever-option engine=... disagree"):
        retriever_options(_parse(["--engine", "bm25s", "--retriever-option", "engine=native"]))


def test_several_engines_get_the_options_each_takes():
    args = _parse(
        ["--retrievers", "bm25,e5-hnsw,random", "--encoder", "minilm", "--ef-search", "64", "--seed", "3"],
        several=True,
        flags=("encoder", "ef_search", "seed"),
    )
    assert retriever_options_by_engine(args) == {
        "bm25": {},
        "e5-hnsw": {"encoder": "minilm", "ef_search": 64},
        "random": {"seed": 3},
    }
    with pytest.raises(ValueError, match="--encoder: none of the retrievers bm25, random takes 'encoder'"):
        retriever_options_by_engine(_parse(["--retrievers", "bm25,random", "--encoder", "minilm"], several=True))


def test_rows_reach_the_environment_through_reset_and_share_its_engines():
    """No per-row environment cache: the composition root shares the retriever and the reward spec."""
    from searchenv.adapters.rows import episode_env, row_example

    options = {"retriever": "random", "topk": 2}
    first, info = episode_env(
        row_example({"target": ["Ilsa Brevondt"]}, {"question": QUESTIONS[0]["question"]}), options
    )
    second, _ = episode_env(row_example(["1312"], {"question": QUESTIONS[2]["question"]}), options)
    assert info["question"] == QUESTIONS[0]["question"] and first.episode.example.golden_answers == ("Ilsa Brevondt",)
    assert second.episode.example.golden_answers == ("1312",)
    assert first.retriever is second.retriever and first.reward_spec is second.reward_spec
    with pytest.raises(ValueError, match="come from each training row"):
        episode_env(first.episode.example, {"dataset": "nq"})


SAMPLING_SPELLINGS = ("--temperature", "--top-p", "--max-new-tokens", "--max-total-tokens", "--chat-template")


def test_the_sampling_options_are_declared_by_one_function():
    """Before, train-sft and train-trl declared --max-new-tokens themselves (type int: 0 and -5 trained) and
    train-ppo declared it from PPOConfig's fields, while demo and eval refused such values."""
    declared = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                spelt = [a.value for a in node.args if isinstance(a, ast.Constant)]
                declared += [f"{_relative(path)}: {flag}" for flag in spelt if flag in SAMPLING_SPELLINGS]
    assert declared == []  # add_sampling_arguments spells them from SAMPLING_FLAGS: no literal anywhere


def _sampling_actions() -> dict[str, dict[str, argparse.Action]]:
    commands = next(a for a in build_parser(COMMANDS)._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {
            flag: action for action in parser._actions for flag in action.option_strings if flag in SAMPLING_SPELLINGS
        }
        for name, parser in commands.choices.items()
    }


def test_every_command_that_samples_has_the_sampling_flags():
    actions = _sampling_actions()
    assert set(actions["demo"]) == set(actions["eval"]) == set(actions["train-ppo"]) == set(SAMPLING_SPELLINGS)
    assert set(actions["train-trl"]) == set(SAMPLING_SPELLINGS) - {"--max-total-tokens"}  # its cap: completion length
    assert set(actions["train-sft"]) == {"--max-new-tokens", "--chat-template"}  # recorded for eval, not sampled
    assert actions["play"] == {}  # a person types the actions


@pytest.mark.parametrize("command", ["demo", "eval", "train-ppo", "train-sft", "train-trl"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_every_command_refuses_a_token_cap_below_one_in_one_line(command, value, capsys):
    """Before, `train-sft --max-new-tokens -5` and `train-trl --max-new-tokens 0` trained."""
    from searchenv.cli.main import main

    with pytest.raises(SystemExit) as excinfo:
        main([command, "--max-new-tokens", value])
    assert excinfo.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert errors == [
        f"searchenv {command}: error: argument --max-new-tokens: max_new_tokens must be a positive integer, got {value}"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--temperature", "-0.5"], "temperature must be in [0, inf), got -0.5; 0 is greedy"),
        (["--top-p", "1.5"], "top_p must be in (0, 1] (1 = off), got 1.5"),
        (["--top-p", "nan"], "top_p must be in (0, 1] (1 = off), got nan"),
        (["--max-total-tokens", "1"], "max_total_tokens must be an integer >= 2"),
        (["--max-new-tokens", "2.5"], "expected an integer, got '2.5'"),
    ],
)
def test_the_sampling_flags_refuse_what_the_settings_type_refuses(argv, message, capsys):
    from searchenv.cli.options import add_sampling_arguments

    parser = argparse.ArgumentParser(prog="probe")
    add_sampling_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert f"probe: error: argument {argv[0]}: {message}" in capsys.readouterr().err


def test_a_command_declares_only_sampling_flags_that_exist():
    from searchenv.cli.options import add_sampling_arguments

    with pytest.raises(ValueError, match="no sampling flag 'max_tokens' \\(did you mean 'max_new_tokens'"):
        add_sampling_arguments(argparse.ArgumentParser(), flags=("max_tokens",))

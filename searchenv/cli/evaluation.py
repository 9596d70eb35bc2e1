"""The evaluation commands: ``searchenv eval``, ``searchenv eval-data`` and ``searchenv view``.

Parsers and thin handlers only; :func:`searchenv.evaluation.suite.run_eval` runs an evaluation, and the heavy
parts are imported when a command runs. ``eval``'s retrievers are the retriever group every command shares
(:func:`searchenv.cli.options.add_retriever_arguments`, several engines, options routed to the engines that take
them); its episode settings default to the checkpoint's own, else to :data:`searchenv.evaluation.suite.DEFAULTS`.
"""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.cli.options import add_retriever_arguments, add_sampling_arguments
from searchenv.evaluation.suite import CPU_DEFAULTS, DEFAULTS

__all__ = ["EVAL_RETRIEVER_FLAGS", "add_eval_arguments", "add_evaluation_parsers"]

#: The engine options ``searchenv eval`` has flags for (the others: --retriever-option).
EVAL_RETRIEVER_FLAGS = ("engine", "encoder", "index_path")


def _limit(text: str) -> int | str:
    """``--limit``: a positive number of questions per dataset, or ``all``."""
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'all', got {text!r}")
    return value


def _device_note(name: str) -> str:
    gpu, cpu = DEFAULTS.get(name, "all"), CPU_DEFAULTS[name]
    return f"{gpu} on a GPU, {cpu} on CPU"


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``searchenv eval`` (:func:`searchenv.evaluation.suite.run_eval` reads them)."""
    what = parser.add_argument_group("what to evaluate")
    what.add_argument(
        "--model",
        action="append",
        default=None,
        help="checkpoint dir, 'smollm2-135m', or LABEL=PATH; repeat or comma-separate (default: smollm2-135m)",
    )
    what.add_argument("--policy", choices=["local", "vllm", "endpoint"], default="local", help="how to run the model")
    what.add_argument(
        "--baselines",
        default="",
        help="comma list of direct,rag,rag_trained to run beside the agent (rag: a RAG instruction; rag_trained: the "
        "policy's own prompt, one search with the question, then its answer)",
    )
    what.add_argument("--no-agent", action="store_true", help="run only the --baselines")
    data = parser.add_argument_group("data and retrieval")
    data.add_argument(
        "--datasets",
        default="world",
        help="comma list: world, nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique, bamboogle, or files",
    )
    data.add_argument("--split", default=None, help="split of named sets (default: test, or dev where none)")
    data.add_argument("--data-dir", default=None, help="local folder with <name>/<split>.jsonl (else the hub)")
    data.add_argument("--reward", default="em", help="reward spec of the 'reward' column (default: em)")
    data.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help=f"questions per dataset, a seeded subsample, or 'all' (default: {_device_note('limit')})",
    )
    data.add_argument("--seed", type=int, default=0, help="seed of the subsample and of sampling (default: 0)")
    add_retriever_arguments(
        parser,
        several=True,
        default=["bm25"],
        corpus_help="passage jsonl (default: the world's corpus)",
        flags=EVAL_RETRIEVER_FLAGS,
        title="retrievers (each is built once and plays every cell)",
    )
    episode = parser.add_argument_group("episode (default: the checkpoint's searchenv_run.json, else as shown)")
    episode.add_argument("--protocol", default=None, help=f"default {DEFAULTS['protocol']}")
    episode.add_argument("--max-turns", type=int, default=None, help=f"default {DEFAULTS['max_turns']}")
    episode.add_argument("--budget", choices=["actions", "extra-answer-turn"], default=None, help="default actions")
    episode.add_argument("--topk", type=int, default=None, help=f"default {DEFAULTS['topk']}")
    episode.add_argument("--max-information-words", type=int, default=None, help="default 400")
    gen = parser.add_argument_group("generation")
    add_sampling_arguments(
        gen,
        max_new_tokens=None,
        max_total_tokens=None,
        chat_template=None,
        notes={
            "temperature": "default, as the papers evaluate",
            "max_new_tokens": f"default: the checkpoint's, else {_device_note('max_new_tokens')}",
            "max_total_tokens": f"default: the checkpoint's, else {_device_note('max_total_tokens')}",
            "chat_template": "default: the checkpoint's, else auto",
        },
    )
    gen.add_argument(
        "--samples",
        type=int,
        default=1,
        help="episodes per question, each drawn with a seed derived from --seed; more than 1 needs --temperature > 0 "
        "and adds pass@k (any sample right) to the report beside mean EM (default: 1)",
    )
    gen.add_argument("--batch-size", type=int, default=8, help="episodes played together")
    gen.add_argument(
        "--device",
        default="",
        help="local policy device (default: cuda when available, else cpu, which selects the CPU defaults)",
    )
    gen.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    end = parser.add_argument_group("endpoint policy and LLM judge (OpenAI-compatible servers)")
    end.add_argument("--endpoint", default=None, help="base URL, e.g. http://127.0.0.1:8000")
    end.add_argument("--endpoint-model", default=None, help="model name to request (default: the --model value)")
    end.add_argument(
        "--endpoint-mode",
        choices=["completions", "chat"],
        default="completions",
        help="completions: the conversation as one text (as in training); chat: /v1/chat/completions messages",
    )
    end.add_argument("--endpoint-extra", default=None, help="JSON object merged into every request body")
    end.add_argument("--tokenizer", default=None, help="local tokenizer dir, to apply the chat template client-side")
    end.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    end.add_argument("--retries", type=int, default=4, help="retries of a failed request (timeouts, 429, 5xx)")
    end.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    end.add_argument("--judge-url", default=None, help="enable LLM-as-judge accuracy (ACC_L) with this endpoint")
    end.add_argument("--judge-model", default=None, help="model name the judge server serves (with --judge-url)")
    out = parser.add_argument_group("output")
    out.add_argument("--output", default="runs/eval", help="folder for transcripts.jsonl, report.md, metrics.csv/png")
    out.add_argument("--no-plot", action="store_true", help="skip metrics.png (no matplotlib needed)")
    out.add_argument(
        "--max-failed-share",
        type=float,
        default=0.05,
        help="exit 1 when more than this share of episodes had a search the retriever could not serve (they are "
        "not counted as results and are played again on resume)",
    )
    out.add_argument("--report-only", action="store_true", help="rewrite the report from --output's transcripts")


def _run_eval(args: argparse.Namespace) -> int:
    from searchenv.evaluation.suite import run_eval

    return run_eval(args)


def _run_eval_data(args: argparse.Namespace) -> int:
    from searchenv.evaluation.evalset import build_eval_set, write_eval_set

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    examples = build_eval_set(datasets, limit=args.limit, seed=args.seed, data_dir=args.data_dir)
    jsonl, parquet = write_eval_set(examples, args.output, protocol=args.protocol)
    counts: dict[str, int] = {}
    for e in examples:
        counts[e.data_source] = counts.get(e.data_source, 0) + 1
    per_set = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"wrote {len(examples)} questions ({per_set}) to {jsonl} and {parquet}")
    return 0


def _run_view(args: argparse.Namespace) -> int:
    from searchenv.evaluation.viewer import write_viewer

    path = write_viewer(args.transcripts, args.output)
    print(f"wrote {path}")
    return 0


def add_evaluation_parsers(commands: Any) -> None:
    """Register ``eval``, ``eval-data`` and ``view`` on the CLI's subparsers."""
    from searchenv.evaluation.evalset import EVAL_DATASETS

    formatter = argparse.ArgumentDefaultsHelpFormatter
    evaluate = commands.add_parser(
        "eval",
        help="evaluate policies, baselines and retrievers on QA sets (EM, F1, recall, ...; resumable)",
        description="Evaluate search agents and the Direct / RAG baselines; writes transcripts.jsonl, report.md, "
        "metrics.csv and metrics.png into --output. Rerun the same command to resume an interrupted run.",
    )
    add_eval_arguments(evaluate)
    evaluate.set_defaults(handler=_run_eval)

    data = commands.add_parser(
        "eval-data",
        help="write the papers' mixed evaluation set (7 sets, test or dev) as jsonl and veRL parquet",
        formatter_class=formatter,
    )
    data.add_argument("--datasets", default=",".join(EVAL_DATASETS), help="comma list of names or files")
    data.add_argument("--data-dir", default=None, help="local folder with <name>/<split>.jsonl (else the hub)")
    data.add_argument("--limit", type=int, default=None, help="questions per dataset (seeded subsample)")
    data.add_argument("--seed", type=int, default=0, help="seed of the per-dataset subsample")
    data.add_argument("--protocol", default="search-r1", help="prompt written into the parquet rows")
    data.add_argument("--output", required=True, help="folder for test.jsonl and test.parquet")
    data.set_defaults(handler=_run_eval_data)

    view = commands.add_parser("view", help="write one static HTML page to read evaluation transcripts")
    view.add_argument("transcripts", help="transcripts.jsonl written by searchenv eval")
    view.add_argument("-o", "--output", default="transcripts.html", help="HTML file to write")
    view.set_defaults(handler=_run_view)

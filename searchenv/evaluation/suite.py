"""``searchenv eval``: policies x methods x retrievers x datasets in one resumable run, then the report.

Everything is validated before any model or index loads (datasets, reward, retrievers, endpoint reachability);
each retriever is built once and shared by every cell; each model is loaded once and plays every cell; finished
episodes go to ``transcripts.jsonl`` as they finish, so Ctrl-C or a crash loses at most one batch and a rerun of
the same command resumes. The report (``report.md``), ``metrics.csv`` and ``metrics.png`` are rewritten at the end
from every record in the transcripts file, including those of earlier runs.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.components import check_examples_for_reward
from searchenv.env.defaults import env_default
from searchenv.evaluation.baselines import METHODS
from searchenv.evaluation.checkpoint import (
    CHAT_TEMPLATE_WORDS,
    REPLAYED,
    RUN_FILE,
    TOKEN_BUDGET,
    read_run_settings,
    replay_settings,
)
from searchenv.evaluation.evalset import eval_split, subsample
from searchenv.evaluation.policies import EndpointPolicy, LocalPolicy, Policy, VLLMPolicy
from searchenv.evaluation.progress import EvalProgress
from searchenv.evaluation.report import (
    markdown_report,
    plot_health,
    plot_summary,
    search_failed,
    summarize,
    write_csv,
)
from searchenv.evaluation.runner import Cell, TranscriptStore, exclusive_output, record_key, run_cell
from searchenv.retrievers import route_options
from searchenv.sampling import SamplingConfig
from searchenv.types import QAExample

__all__ = ["CPU_DEFAULTS", "DEFAULTS", "ModelSpec", "run_eval"]

#: Episode settings used when neither the user nor the checkpoint's searchenv_run.json gives one: the environment's
#: own defaults, and Search-R1's evaluation token budget (sized for a GPU).
DEFAULTS: dict[str, Any] = {
    **{key: env_default(key) for key in ("protocol", "max_turns", "budget", "topk", "max_information_words")},
    "chat_template": None,
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


# -- validation and loading (nothing heavy) ----------------------------------------------------------------------
def _methods(args: argparse.Namespace) -> list[str]:
    baselines = _csv(args.baselines)
    choices = ",".join(m for m in METHODS if m != "agent")
    if any(b not in METHODS or b == "agent" for b in baselines):
        raise ValueError(f"--baselines takes a comma list of {choices} (got {args.baselines!r})")
    methods = list(dict.fromkeys(([] if args.no_agent else ["agent"]) + baselines))
    if not methods:
        raise ValueError(f"--no-agent needs --baselines, a comma list of {choices} (nothing to evaluate)")
    return methods


@dataclass(frozen=True)
class _Questions:
    """One ``--datasets`` item: its questions, its split (``None`` for a file, which has none) and, for a file, its
    absolute path; the last two go into every record."""

    examples: list[tuple[str, QAExample]]
    split: str | None
    source: str | None


def _datasets(args: argparse.Namespace, limit: int | None) -> dict[str, _Questions]:
    from searchenv.data.datasets import HUB_DATASETS, load_dataset

    out: dict[str, _Questions] = {}
    for name in _csv(args.datasets):
        named = name in HUB_DATASETS or name == "world"
        split = args.split or (eval_split(name) if name in HUB_DATASETS else "test")
        examples = load_dataset(name, split, data_dir=args.data_dir)
        label = name if named else Path(name).stem
        ids = [e.id for e in examples]
        unique = len(set(ids)) == len(ids)
        chosen = subsample(len(examples), limit, args.seed)
        picked = [(examples[i].id if unique else f"#{i}", examples[i]) for i in chosen]
        out[label] = _Questions(picked, split if named else None, None if named else str(Path(name).resolve()))
    if not out:
        raise ValueError("--datasets is empty")
    needs_corpus = [d for d in out if d != "world"]
    if needs_corpus and args.corpus is None and not all(r.startswith("http") for r in args.retrievers):
        raise ValueError(f"datasets {needs_corpus} need --corpus PATH (passage jsonl); only 'world' has its own")
    return out


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
    replayed = [f"{key} {settings[key]}" for key in REPLAYED if key in trained and requested.get(key) is None]
    if replayed:
        print(f"searchenv eval: {model.label} replays its {RUN_FILE}: {', '.join(replayed)}", file=sys.stderr)
    settings["chat_template"] = CHAT_TEMPLATE_WORDS.get(settings["chat_template"], settings["chat_template"])
    settings["reward"] = args.reward
    settings.update(temperature=args.temperature, top_p=args.top_p)
    return settings, [str(m) for m in mismatches], trained.get("retriever")


def _sampling(args: argparse.Namespace, settings: dict[str, Any]) -> SamplingConfig:
    """Decoding settings: the token budget of ``settings`` (a model's replayed ones, or the run's defaults) unless
    the command line gives one."""
    budget = {k: settings[k] if getattr(args, k) is None else getattr(args, k) for k in TOKEN_BUDGET}
    tokens = budget["max_new_tokens"], budget["max_total_tokens"]
    return SamplingConfig(args.temperature, args.top_p, *tokens, seed=args.seed)


def _policy(args: argparse.Namespace, model: ModelSpec, settings: dict[str, Any], progress: EvalProgress) -> Policy:
    sampling, chat_template = _sampling(args, settings), settings["chat_template"]
    if args.policy == "local":
        return LocalPolicy.load(
            model.path, sampling, chat_template, model.label, args.device, on_tokens=progress.tokens_streamed
        )
    if args.policy == "vllm":
        return VLLMPolicy(model.path, sampling, chat_template, name=model.label)
    return _endpoint(args, model, sampling, chat_template)


def _endpoint(
    args: argparse.Namespace, model: ModelSpec, sampling: SamplingConfig, chat: bool | None
) -> EndpointPolicy:
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
    from searchenv.evaluation.judged_accuracy import JudgedAccuracy

    if not args.judge_model:
        raise ValueError("--judge-url needs --judge-model (the model name the judge server serves)")
    judge = JudgedAccuracy(args.judge_url, args.judge_model, retries=args.retries, timeout=args.timeout)
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
    if args.policy == "local":  # a mistyped --model costs no index build and leaves no output folder
        from searchenv.rollout.models import check_model

        for model in models:
            check_model(model.path)
    methods = _methods(args)
    retriever_names = list(args.retrievers)
    flags = [(key, value) for key in getattr(args, "retriever_flags", ()) if (value := getattr(args, key)) is not None]
    engine_options = route_options(retriever_names, [*flags, *args.retriever_option], "--retriever-option {}".format)
    reward = load_reward(args.reward)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be positive, got {args.batch_size}")
    defaults, limit = _device_defaults(args)
    datasets = _datasets(args, limit)
    for questions in datasets.values():  # hop-credit refuses questions without hop answers, before anything loads
        check_examples_for_reward(reward, [example for _, example in questions.examples])
    sampling = _sampling(args, defaults)  # validates temperature / lengths
    _check_samples(args.samples, sampling.temperature)
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
        questions = sum(len(v.examples) for v in datasets.values())
        total = len(models) * len(retriever_names) * len(methods) * questions * args.samples
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


def _check_samples(samples: int, temperature: float) -> None:
    """``--samples``: at least 1; more than one only when decoding samples (greedy would play K identical copies)."""
    if samples < 1:
        raise ValueError(f"--samples must be at least 1, got {samples}")
    if samples > 1 and temperature == 0:
        raise ValueError(
            f"--samples {samples} draws several episodes per question, but --temperature 0 is greedy and would play "
            f"{samples} identical ones; pass --temperature 1 (pass@k at T = 1), or --samples 1"
        )


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
    datasets: dict[str, _Questions],
    retrievers: dict[str, Any],
    store: TranscriptStore,
    judge: Any,
    progress: EvalProgress,
) -> None:
    """Every (retriever, dataset, method, sample) cell of one model; the model loads only if some episode is left."""
    settings, mismatches, trained_on = _settings(args, model, defaults)
    for m in mismatches:
        print(f"warning: {model.label}: {m} (asked for; the checkpoint's own setting differs)", file=sys.stderr)
    policy = None
    for retriever, engine in retrievers.items():
        for label, questions in datasets.items():
            examples = questions.examples
            for method in methods:
                for sample in range(args.samples):
                    key = (model.label, method, retriever, label)
                    pending = [e for e in examples if not store.done(record_key(*key, e[0], sample), settings)]
                    progress.episodes_done(len(examples) - len(pending))
                    if not pending:
                        continue
                    policy = policy or _policy(args, model, settings, progress)
                    split, source = questions.split, questions.source
                    cell = Cell(*key, examples, settings, trained_on, mismatches, sample, split=split, source=source)
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

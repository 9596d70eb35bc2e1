"""The whole learning run from one seed — warm start, reinforcement learning, a control,
held-out evaluation, the evidence table and its plots — on a 2-core CPU in about 75 minutes.

The stages, each a ``searchenv`` command run as a child process (its output goes to ``OUTPUT/logs/``; a stage
whose result exists is skipped, so an interrupted run resumes where it stopped):

1. ``sft``: ``searchenv train-sft`` — SmolLM2-135M imitates the scripted demonstrator on the world's one- and
   two-hop train questions (:data:`~searchenv.adapters.sft.recipe.SFT_RECIPE`).
2. ``rl`` and ``rl_random``, side by side: ``searchenv train-ppo`` from the warm start with GRPO and an EM
   reward (:data:`RL_RECIPE`), once with BM25 and once with ``retriever="random"`` — the control in which search
   cannot help (under EM all of its groups are all-equal, so it never updates and stays the warm start). The
   demonstrations stopped at two hops: chaining the three and four searches the other questions need is what
   reinforcement learning has to add.
3. ``world2``: the test split of a second generated world (seed 1: new entities), so held-out numbers also show
   the policy copies what it reads rather than what it memorised.
4. ``eval``: ``searchenv eval`` of ``base`` (the untrained model), ``sft``, ``rl`` and ``rl_random``, as the agent
   and as RAG (one retrieval for the question, then the answer), greedy, on both worlds' test questions.
5. ``evidence``: ``per_question.csv`` (one row per policy × mode × question), ``summary.md`` (paired bootstrap
   intervals, EM by hop count), ``training.png`` and ``hops.png``.

``dry_run`` prints the commands instead of running them; ``tiny`` shrinks every stage to seconds (the test suite
runs it). The command is ``searchenv learn`` (:mod:`searchenv.cli.learn`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.adapters.sft.recipe import LEARN_ENV, SFT_RECIPE

__all__ = ["EVAL_SETTINGS", "RL_RECIPE", "Stage", "plan", "run", "write_evidence"]

#: The reinforcement-learning stage (``searchenv train-ppo`` options) from the warm start: GRPO with an EM reward,
#: 3 questions x groups of 8 per step (smaller groups of a warm-started policy are mostly all right or all wrong)
#: at temperature 1, groups whose rewards are all equal left out of the update, every hop count (a run on two hops
#: and more taught the policy to search twice for one-hop questions), the warm start's trainable layers, 80 tokens
#: a turn (the demonstrator's longest turn is 58), bf16 (rollouts from a bf16 copy of the weights, updates under
#: autocast: 1.5-1.9 times faster steps than float32 on this CPU's AMX units, docs/benchmarks.md "Training step"),
#: and validation on the 64 held-out train questions every 10 steps.
RL_RECIPE: dict[str, Any] = {
    "demonstration": False,  # train-ppo's CPU recipe prepends a worked example; the warm start needs none
    "algorithm": "grpo",
    "prompts_per_step": 3,
    "group_size": 8,
    "mini_batch_size": 24,
    "micro_batch_size": 8,
    "lr": 3e-5,
    "kl_coef": 0.0,
    "entropy_coef": 0.0,
    "temperature": 1.0,
    "max_new_tokens": 80,
    "max_total_tokens": 1536,
    "curriculum_steps": 0,
    "min_hops": 0,
    "trainable_layers": SFT_RECIPE["trainable_layers"],
    "validation": SFT_RECIPE["validation"],
    "eval_every": 10,
    "bf16": True,
    "steps": 40,
}
#: How every policy is evaluated: the learning environment's settings, greedy, every test question.
EVAL_SETTINGS: dict[str, Any] = {
    "protocol": LEARN_ENV["protocol"],
    "chat_template": LEARN_ENV["chat_template"],
    "max_turns": LEARN_ENV["max_turns"],
    "topk": LEARN_ENV["topk"],
    "max_information_words": LEARN_ENV["max_information_words"],
    "max_new_tokens": RL_RECIPE["max_new_tokens"],
    "max_total_tokens": RL_RECIPE["max_total_tokens"],
    "temperature": 0,
    "limit": "all",
    "batch_size": 32,
    "baselines": "rag",
    "device": "cpu",
}
#: ``--tiny``: every stage in seconds (the pipeline's own test), never a result.
_TINY_SFT = {"steps": 1, "batch_size": 2, "micro_batch_size": 2, "limit": 4, "validation": 4}
_TINY_RL = {"steps": 1, "prompts_per_step": 1, "group_size": 2, "mini_batch_size": 2, "micro_batch_size": 2}
_TINY_RL |= {"max_new_tokens": 8, "validation": 4, "eval_every": 1}
_TINY_EVAL = {"limit": 2, "max_new_tokens": 8, "batch_size": 2}


@dataclass(frozen=True)
class Stage:
    """One step of the run: the commands it runs side by side, and the file whose presence means it is done."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    done: Path
    logs: tuple[Path, ...]


def _flags(options: dict[str, Any]) -> list[str]:
    """Command-line words for ``options``: ``--key value``, or ``--key`` / ``--no-key`` for a boolean."""
    words = []
    for key, value in options.items():
        flag = key.replace("_", "-")
        if isinstance(value, bool):
            words.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            words += [f"--{flag}", str(value)]
    return words


def _searchenv(*words: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "searchenv.cli", *words)


def plan(output: Path, seed: int, tiny: bool = False, threads: int = 1) -> list[Stage]:
    """The run's stages as commands (see the module docstring); ``tiny`` shrinks every one to seconds."""
    logs = output / "logs"
    env = {k: v for k, v in LEARN_ENV.items()}
    sft = {**SFT_RECIPE, **(_TINY_SFT if tiny else {})}
    rl = {**RL_RECIPE, **(_TINY_RL if tiny else {})}
    evaluation = {**EVAL_SETTINGS, **(_TINY_EVAL if tiny else {})}
    common = ["--seed", str(seed), "--threads", str(threads)]
    stages = [
        Stage(
            "sft",
            (
                _searchenv(
                    "train-sft",
                    *_flags(env),
                    *_flags(sft),
                    *common,
                    "--output-dir",
                    str(output / "sft"),
                    "--log",
                    str(logs / "sft.jsonl"),
                ),
            ),
            output / "sft" / "final" / "searchenv_run.json",
            (logs / "sft.jsonl",),
        )
    ]
    rl_commands = []
    for name, retriever in (("rl", "bm25"), ("rl_random", "random")):
        rl_env = {**env, "retriever": retriever}
        rl_commands.append(
            _searchenv(
                "train-ppo",
                "--model",
                str(output / "sft" / "final"),
                *_flags(rl_env),
                *_flags(rl),
                *common,
                "--output-dir",
                str(output / name),
                "--log",
                str(logs / f"{name}.jsonl"),
            )
        )
    stages.append(
        Stage(
            "rl",
            tuple(rl_commands),
            output / "rl_random" / "final" / "searchenv_run.json",
            (logs / "rl.jsonl", logs / "rl_random.jsonl"),
        )
    )
    world2 = output / "world-seed1"
    stages.append(
        Stage(
            "world2",
            (_searchenv("world", "--seed", "1", "--passages", "2000", "--output", str(world2)),),
            world2 / "test.jsonl",
            (),
        )
    )
    models = ",".join(
        [
            "base=smollm2-135m",
            *(f"{name}={output / name / 'final'}" for name in ("sft", "rl", "rl_random")),
        ]
    )
    eval_common = ["--model", models, *_flags(evaluation), "--seed", str(seed), "--threads", str(threads), "--no-plot"]
    stages.append(
        Stage(
            "eval",
            (
                _searchenv("eval", *eval_common, "--datasets", "world", "--output", str(output / "eval-world")),
                _searchenv(
                    "eval",
                    *eval_common,
                    "--datasets",
                    str(world2 / "test.jsonl"),
                    "--corpus",
                    str(world2 / "corpus.jsonl"),
                    "--output",
                    str(output / "eval-world-seed1"),
                ),
            ),
            output / "eval-world-seed1" / "report.md",
            (),
        )
    )
    return stages


def _run_stage(stage: Stage, output: Path) -> None:
    """Run the stage's commands side by side; each one's output goes to ``logs/<stage>-<i>.out``. A heartbeat line
    every minute names the last step each training log reached."""
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    children = []
    for i, command in enumerate(stage.commands):
        out = (logs / f"{stage.name}-{i}.out").open("w")
        children.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), out, command))
    print(f"[learn] {stage.name}: started {len(children)} process(es); output in {logs}", flush=True)
    heartbeat = started
    try:
        while any(child.poll() is None for child, _, _ in children):
            time.sleep(1)
            if time.monotonic() - heartbeat >= 60:
                heartbeat = time.monotonic()
                print(f"[learn] {stage.name}: {heartbeat - started:.0f} s {_progress(stage)}", flush=True)
    finally:
        for child, out, _ in children:
            if child.poll() is None:
                child.terminate()
                child.wait()
            out.close()
    failed = [(child.returncode, command) for child, _, command in children if child.returncode != 0]
    if failed:
        code, command = failed[0]
        raise RuntimeError(
            f"stage {stage.name!r} failed (exit {code}): {shlex.join(command)}; its output is in {logs}; rerun "
            "`searchenv learn` with the same options to resume from this stage"
        )
    print(f"[learn] {stage.name}: done in {time.monotonic() - started:.0f} s", flush=True)


def _progress(stage: Stage) -> str:
    import json

    parts = []
    for log in stage.logs:
        if log.exists():
            lines = [line for line in log.read_text().splitlines() if line.strip()]
            if lines:
                parts.append(f"{log.stem} step {json.loads(lines[-1]).get('step')}")
    return "(" + ", ".join(parts) + ")" if parts else ""


def write_evidence(output: Path) -> None:
    """``per_question.csv``, ``summary.md``, ``training.png`` and ``hops.png`` from the run's transcripts and logs."""
    import json

    from searchenv.adapters.learn.evidence import (
        per_question_rows,
        plot_hops,
        plot_training,
        summary_markdown,
        write_rows,
    )
    from searchenv.data.datasets import load_dataset

    world2 = output / "world-seed1"
    rows = []
    for folder, name, examples in (
        ("eval-world", "world", load_dataset("world", "test")),
        ("eval-world-seed1", "world-seed1", load_dataset(world2 / "test.jsonl")),
    ):
        hops = {e.id: e.metadata["hops"] for e in examples}
        text = (output / folder / "transcripts.jsonl").read_text(encoding="utf-8")
        rows += per_question_rows([json.loads(line) for line in text.splitlines() if line.strip()], hops, name)
    write_rows(rows, output / "per_question.csv")
    (output / "summary.md").write_text(summary_markdown(rows))
    logs = output / "logs"
    plot_training({name: logs / f"{name}.jsonl" for name in ("rl", "rl_random")}, output / "training.png")
    plot_hops(rows, output / "hops.png")
    print(f"[learn] evidence: {output / 'per_question.csv'} ({len(rows)} rows), {output / 'summary.md'}", flush=True)


def run(output: Path, seed: int = 0, *, threads: int = 1, tiny: bool = False, dry_run: bool = False) -> int:
    """Run (or with ``dry_run`` print) every stage not done yet, then write the evidence; returns 0."""
    stages = plan(output, seed, tiny=tiny, threads=threads)
    if dry_run:
        for stage in stages:
            for command in stage.commands:
                print(f"# {stage.name}\n{shlex.join(command)}")
        return 0
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    started = time.monotonic()
    for stage in stages:
        if stage.done.exists():
            print(f"[learn] {stage.name}: already done ({stage.done}); skipped", flush=True)
            continue
        _run_stage(stage, output)
    write_evidence(output)
    print(f"[learn] the whole run took {time.monotonic() - started:.0f} s", flush=True)
    return 0

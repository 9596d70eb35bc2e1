"""The whole learning run from one seed — warm start, reinforcement learning, its placebo and a second seed,
held-out evaluation, the evidence table and its plots — on a 2-core CPU, or scaled up on one GPU.

The stages, each a few ``searchenv`` commands run side by side as child processes (:mod:`.stages`: output in
``OUTPUT/logs/``, a marker per finished stage, so an interrupted run resumes where it stopped):

1. ``sft``: ``searchenv train-sft`` — SmolLM2-135M imitates the scripted demonstrator on the world's one- and
   two-hop train questions (:data:`~searchenv.adapters.sft.recipe.SFT_RECIPE`). The demonstrations stop at two
   hops: chaining the three and four searches the other questions need is what reinforcement learning must add.
2. ``worlds``: the test splits of two generated worlds with new entities (:data:`.recipe.HELD_OUT_WORLDS`), so
   held-out numbers also show the policy copies what it reads rather than what it memorised.
3. ``rl`` and ``rl2``: three runs of ``searchenv train-ppo`` from the warm start (:data:`.recipe.RL_RECIPE`,
   expert iteration with a difficulty-filtered pool): ``rl``; ``placebo``, the same stage with each group's
   rewards shuffled among its episodes (the updates happen, without the information of which episode was right);
   ``rl_seed1``, a second seed. Each keeps its best checkpoint by validation EM on held-out *train* questions
   (``OUTPUT/<run>/best``). On a CPU the first two run side by side and the second seed after them (each process
   holds ~8 GB); on a GPU all three at once.
4. ``eval``: ``searchenv eval`` of ``base`` (the untrained model), ``sft``, ``rl``, ``placebo`` and ``rl_seed1``
   greedily as the agent, as RAG (an instruction to answer from one retrieval) and as ``rag_trained`` (the
   policy's own prompt and format, one search with the question forced, then its answer), on every held-out world.
5. ``pass4``: ``sft`` and ``rl`` as agents at T = 1, four samples per question (pass@4: sharpening raises pass@1,
   not pass@k).
6. ``evidence``: ``per_question.csv`` and ``per_question_rl_seed1.csv``, ``summary.md`` (paired bootstrap
   intervals, EM and pass@4 by hop count), ``training.png`` and ``hops.png``.

``dry_run`` prints the commands instead of running them; ``tiny`` shrinks every stage to its smallest (the test
suite runs it: 3–7 minutes on 2 cores); ``device="cuda"`` runs every stage on the GPU with the larger batches of
:data:`.recipe.GPU_RL`. The command is ``searchenv learn`` (:mod:`searchenv.cli.learn`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from searchenv.adapters.learn.recipe import (
    EVAL_SETTINGS,
    GPU_EVAL,
    GPU_RL,
    HELD_OUT_WORLDS,
    RL_RECIPE,
    TINY_EVAL,
    TINY_RL,
    TINY_SFT,
)
from searchenv.adapters.learn.stages import Stage, folder_lock, is_done, run_stage
from searchenv.adapters.sft.recipe import LEARN_ENV, SFT_RECIPE

__all__ = ["POLICIES", "RL_RUNS", "plan", "run", "write_evidence"]

#: The reinforcement runs: name → (seed offset, extra train-ppo options).
RL_RUNS: dict[str, tuple[int, dict[str, Any]]] = {
    "rl": (0, {}),
    "placebo": (0, {"placebo": True}),
    "rl_seed1": (1, {}),
}
#: Every evaluated policy, in the evidence's order.
POLICIES = ("base", "sft", *RL_RUNS)


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


def _product(command: tuple[str, ...]) -> str:
    """What a command writes, for ``--dry-run``'s labels: the folder named by its ``--output``/``--output-dir``."""
    for flag in ("--output-dir", "--output"):
        if flag in command:
            return Path(command[command.index(flag) + 1]).name
    return command[3] if len(command) > 3 else ""


def world_folders(output: Path) -> dict[str, Path | None]:
    """The held-out worlds: ``"world"`` (the embedded one, no folder) and ``world-seed<N>`` folders."""
    return {"world": None, **{f"world-seed{seed}": output / f"world-seed{seed}" for seed in HELD_OUT_WORLDS}}


def policy_paths(output: Path, model: str) -> dict[str, str]:
    """What each evaluated policy loads: the base model, the warm start, each RL run's best validated checkpoint."""
    return {"base": model, "sft": str(output / "sft" / "final"), **{n: str(output / n / "best") for n in RL_RUNS}}


def plan(
    output: Path,
    seed: int,
    *,
    tiny: bool = False,
    threads: int = 1,
    device: str = "cpu",
    model: str = "smollm2-135m",
    rl_minutes: float = 0.0,
) -> list[Stage]:
    """The run's stages as commands (see the module docstring); ``rl_minutes > 0`` stops each RL run after the
    first step past that time (its best validated checkpoint is what is evaluated)."""
    logs = output / "logs"
    gpu = device != "cpu"
    sft = {**SFT_RECIPE, **(TINY_SFT if tiny else {})}
    rl = {**RL_RECIPE, **(GPU_RL if gpu else {}), **(TINY_RL if tiny else {})}
    if rl_minutes:
        rl["time_limit"] = rl_minutes * 60
    evaluation = {**EVAL_SETTINGS, **(GPU_EVAL if gpu else {}), **(TINY_EVAL if tiny else {})}
    machine = ["--threads", str(threads), "--device", device]
    train = [*_flags(LEARN_ENV), *machine]
    stages = [
        Stage(
            "sft",
            (
                _searchenv(
                    "train-sft",
                    "--model",
                    model,
                    *train,
                    *_flags(sft),
                    "--seed",
                    str(seed),
                    "--output-dir",
                    str(output / "sft"),
                    "--log",
                    str(logs / "sft.jsonl"),
                ),
            ),
            (logs / "sft.jsonl",),
        ),
        Stage(
            "worlds",
            tuple(
                _searchenv(
                    "world",
                    *("--seed", str(s), "--passages", "2000", "--questions", "500"),  # 50 test questions each
                    *("--output", str(output / f"world-seed{s}")),
                )
                for s in HELD_OUT_WORLDS
            ),
        ),
    ]
    rl_commands = []
    for name, (offset, extra) in RL_RUNS.items():
        rl_commands.append(
            _searchenv(
                "train-ppo",
                "--model",
                str(output / "sft" / "final"),
                *train,
                *_flags({**rl, **extra}),
                "--seed",
                str(seed + offset),
                "--output-dir",
                str(output / name),
                "--log",
                str(logs / f"{name}.jsonl"),
            )
        )
    names = list(RL_RUNS)
    # Each RL process holds ~8 GB on a CPU: two side by side fit a 24 GB machine, three do not; a GPU runs all three.
    groups = [names] if gpu else [names[:2], names[2:]]
    for i, group in enumerate(groups):
        stages.append(
            Stage(
                "rl" if i == 0 else f"rl{i + 1}",
                tuple(rl_commands[names.index(n)] for n in group),
                tuple(logs / f"{n}.jsonl" for n in group),
            )
        )
    paths = policy_paths(output, model)
    greedy, sampled = [], []
    for world, folder in world_folders(output).items():
        data = ["--datasets", "world"] if folder is None else ["--datasets", str(folder / "test.jsonl")]
        data += [] if folder is None else ["--corpus", str(folder / "corpus.jsonl")]
        common = [*data, "--seed", str(seed), *machine, "--no-plot"]
        models = ",".join(f"{name}={paths[name]}" for name in POLICIES)
        greedy.append(
            _searchenv(
                "eval",
                "--model",
                models,
                "--baselines",
                "rag,rag_trained",
                *_flags(evaluation),
                *common,
                "--output",
                str(output / f"eval-{world}"),
            )
        )
        sampled.append(
            _searchenv(
                "eval",
                "--model",
                f"sft={paths['sft']},rl={paths['rl']}",
                *_flags({**evaluation, "temperature": 1, "samples": 4}),
                *common,
                "--output",
                str(output / f"pass4-{world}"),
            )
        )
    stages += [Stage("eval", tuple(greedy)), Stage("pass4", tuple(sampled))]
    return stages


def write_evidence(output: Path) -> None:
    """``per_question.csv``, ``per_question_rl_seed1.csv``, ``summary.md``, ``training.png`` and ``hops.png`` from
    the run's transcripts and logs."""
    from searchenv.adapters.learn.evidence import (
        pass_at_k_rows,
        per_question_rows,
        plot_hops,
        plot_training,
        read_transcripts,
        summary_markdown,
        write_rows,
    )
    from searchenv.data.datasets import load_dataset

    rows, samples = [], []
    for world, folder in world_folders(output).items():
        examples = load_dataset("world", "test") if folder is None else load_dataset(folder / "test.jsonl")
        hops = {e.id: e.metadata["hops"] for e in examples}
        rows += per_question_rows(read_transcripts(output / f"eval-{world}"), hops, world)
        samples += pass_at_k_rows(read_transcripts(output / f"pass4-{world}"), hops, world)
    seed1 = [r for r in rows if r["policy"] == "rl_seed1"]
    main = [r for r in rows if r["policy"] != "rl_seed1"]
    write_rows(main, output / "per_question.csv")
    write_rows([r for r in seed1 if r["mode"] == "agent"], output / "per_question_rl_seed1.csv")
    write_rows(samples, output / "pass_at_4.csv")
    (output / "summary.md").write_text(summary_markdown(rows, samples))
    logs = output / "logs"
    plot_training({name: logs / f"{name}.jsonl" for name in RL_RUNS}, output / "training.png")
    plot_hops(rows, output / "hops.png")
    print(f"[learn] evidence: {output / 'per_question.csv'} ({len(main)} rows), {output / 'summary.md'}", flush=True)


def run(
    output: Path,
    seed: int = 0,
    *,
    threads: int = 1,
    tiny: bool = False,
    dry_run: bool = False,
    device: str = "cpu",
    model: str = "smollm2-135m",
    rl_minutes: float = 0.0,
) -> int:
    """Run (or with ``dry_run`` print) every stage not done yet, then write the evidence; returns 0."""
    from searchenv.rollout import remove_partial_checkpoints

    stages = plan(output, seed, tiny=tiny, threads=threads, device=device, model=model, rl_minutes=rl_minutes)
    if dry_run:
        for stage in stages:
            for command in stage.commands:
                print(f"# {stage.name}: {_product(command)}\n{shlex.join(command)}")
        print("# evidence\n(per_question.csv, per_question_rl_seed1.csv, pass_at_4.csv, summary.md, plots)")
        return 0
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    started = time.monotonic()
    with folder_lock(output) as lock_fd:
        for stale in remove_partial_checkpoints(output):
            print(f"[learn] removed a half-saved checkpoint of a killed run: {stale}", flush=True)
        for stage in stages:
            if is_done(output, stage):
                print(f"[learn] {stage.name}: already done; skipped", flush=True)
                continue
            run_stage(stage, output, lock_fd)
        write_evidence(output)
    print(f"[learn] the whole run took {time.monotonic() - started:.0f} s", flush=True)
    return 0

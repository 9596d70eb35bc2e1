"""Train a causal LM on SearchQA-v0 with the built-in PPO / GRPO / REINFORCE++ loop.

Run with no options, it trains SmolLM2-135M on the generated world with the CPU recipe (:data:`CPU_RECIPE`) that
raises reward within minutes on a 2-core machine (docs/experiments.md has the curve)::

    python -m searchenv.adapters.ppo.train --log runs/grpo.jsonl --plot runs/grpo.png

``--model PATH --paper`` switches every default to Search-R1's (:data:`PAPER_ENV` and
:meth:`~searchenv.adapters.ppo.trainer.PPOConfig.paper`: EM reward, the instruction prompt in the chat template,
4 actions, top-3 passages, 512 prompts per step, 500 tokens per turn, bf16 autocast): the GPU recipe. Options given
on the command line override either recipe.

Metrics go to stdout and to ``--log`` (one JSON object per step); ``--plot`` redraws reward, EM, valid searches
per episode and response length against steps after every step, so a long run can be watched. A checkpoint
with ``searchenv_run.json`` (what ``eval``/``demo`` need to replay it) is saved to ``--output-dir`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from searchenv.cli.options import SAMPLING_FLAGS, add_sampling_arguments, chat_template
from searchenv.cli.parsers import CommandParser
from searchenv.env.defaults import env_default

_DESCRIPTION = __doc__.split("\n")[0]

__all__ = [
    "ALGORITHM_HELP",
    "CPU_RECIPE",
    "PAPER_ENV",
    "TWO_STAGE_RECIPE",
    "add_env_arguments",
    "add_parser",
    "apply_recipe",
    "build_parser",
    "env_kwargs",
    "health_plot_path",
    "main",
    "plot_log",
    "replay_demonstrations",
    "run_settings",
    "stages",
]

#: Columns drawn by :func:`plot_log`: (metric key, panel title).
PLOTTED = (
    ("reward", "reward (mean per episode)"),
    ("reward/em", "exact match"),
    ("num_searches", "searches / episode"),
    ("rollout/model_tokens", "response length (model tokens)"),
)
#: The reasoning-health panels (:data:`searchenv.episode.health.HEALTH_METRICS`), drawn beside the curves.
HEALTH_PLOTTED = (
    ("think_words", "think words / episode"),
    ("think_repetition", "repeated 4-grams in think"),
    ("duplicate_search_rate", "duplicate searches (share)"),
    ("answer_words", "answer words"),
)

#: The CPU recipe (the defaults): what made SmolLM2-135M's reward rise on the generated world in minutes
#: (docs/experiments.md). One worked example as a plain-text prompt (a 135M model writes no tag from the
#: instruction alone), R1-Searcher's stage-1 reward (pays for an executed search and a well-formed response, so
#: a GRPO group has reward variance from the first step), 1-hop questions first (2-hop from step 21), short
#: turns, a high lr and no KL term.
CPU_RECIPE: dict[str, Any] = {
    "reward": "r1-searcher-stage1",
    "demonstration": True,
    "chat_template": "off",
    "max_turns": 2,
    "topk": 2,
    "max_information_words": 40,
    "prompts_per_step": 2,
    "group_size": 4,
    "mini_batch_size": 8,
    "micro_batch_size": 4,
    "max_new_tokens": 32,
    "max_total_tokens": 512,
    "lr": 3e-5,
    "kl_coef": 0.0,  # no reference model: a third less work per step on a CPU
    "curriculum_steps": 20,
    "steps": 12,
}
#: R1-Searcher's two stages on a CPU (``--recipe two-stage``, issue 26): stage 1 pays for executed searches and
#: format (``--stage1-reward`` for ``--stage1-steps`` steps), stage 2 for the answer (``--reward``, F1 minus 2 for a
#: malformed response, for ``--steps`` more steps), starting from stage 1's weights. Three actions and 40 tokens
#: per turn leave room to answer after a search, which the CPU recipe's two actions of 32 tokens did not.
TWO_STAGE_RECIPE: dict[str, Any] = {
    "reward": "r1-searcher-stage2",
    "stage1_reward": "r1-searcher-stage1",
    "stage1_steps": 8,
    "steps": 22,
    "max_turns": 3,
    "max_new_tokens": 40,
    "curriculum_steps": 24,
}
#: Search-R1's environment settings (SPEC §5), the environment half of ``--paper``: SearchQAEnv's own defaults
#: (which are Search-R1's) for what the CPU recipe changes, and the paper's prompt.
PAPER_ENV: dict[str, Any] = {
    **{name: env_default(name) for name in ("reward", "max_turns", "topk", "max_information_words")},
    "demonstration": False,
    "chat_template": "auto",
}


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """The environment options every searchenv command shares (:func:`searchenv.cli.arguments.add_env_arguments`)
    plus the trainers' prompt option ``--demonstration`` (``--chat-template`` is a sampling flag:
    :func:`searchenv.cli.options.add_sampling_arguments`)."""
    from searchenv.cli.arguments import add_env_arguments as add_shared

    add_shared(parser, reward="format")
    prompt = parser.add_argument_group("prompt")
    prompt.add_argument(
        "--demonstration",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="prepend one worked example to the prompt (protocol search-r1-fewshot; helps very small models)",
    )


def _protocol(args: argparse.Namespace) -> str:
    """``--demonstration`` selects the one-example prompt of the search-r1 tags (``search-r1-fewshot``)."""
    if not args.demonstration:
        return args.protocol
    if args.protocol not in ("search-r1", "search-r1-fewshot"):
        raise ValueError(f"--demonstration is written for the search-r1 tags, not {args.protocol!r}")
    return "search-r1-fewshot"


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`~searchenv.env.SearchQAEnv` arguments, every option checked before a model or an index loads."""
    from searchenv.cli.arguments import env_kwargs as shared_kwargs

    args.protocol = _protocol(args)
    return shared_kwargs(args)


def run_settings(args: argparse.Namespace, algorithm: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """What ``searchenv_run.json`` records (see :data:`searchenv.rollout.RUN_KEYS`)."""
    env = env_kwargs(args)
    return {
        "model": args.model,
        "chat_template": chat_template(args.chat_template),
        "max_new_tokens": args.max_new_tokens,  # the per-turn budget, replayed by `searchenv eval`
        **env,
        "algorithm": algorithm,
        "config": dict(config),
    }


def apply_recipe(parser: argparse.ArgumentParser, argv: Sequence[str] | None, paper_config: Any = None) -> None:
    """Set the parser's defaults to the CPU recipe (``--recipe two-stage``: :data:`TWO_STAGE_RECIPE` over it), or
    with ``--paper`` to Search-R1's.

    ``paper_config(algorithm)`` returns the paper's trainer settings as a mapping of option names.
    """
    options = {action.dest for action in parser._actions}
    parser.set_defaults(**{k: v for k, v in CPU_RECIPE.items() if k in options})
    words = sys.argv[1:] if argv is None else argv
    known, _ = parser.parse_known_args([w for w in words if w not in ("-h", "--help")])  # help shows the result
    if getattr(known, "recipe", "cpu") == "two-stage":
        parser.set_defaults(**{k: v for k, v in TWO_STAGE_RECIPE.items() if k in options})
    if not known.paper:
        return
    defaults = dict(PAPER_ENV)
    if paper_config is not None:
        defaults.update(paper_config(known))
    parser.set_defaults(**{k: v for k, v in defaults.items() if k in options})


#: One help line per :class:`~searchenv.adapters.ppo.trainer.PPOConfig` field but the sampling settings, whose
#: flags are :func:`searchenv.cli.options.add_sampling_arguments`'s (``--help`` appends the default, which the recipe
#: or ``--paper`` may change). A field added to PPOConfig without a line here fails the CLI tests.
ALGORITHM_HELP: dict[str, str] = {
    "algorithm": "ppo (with a critic), grpo (group-relative advantages), reinforce++, or expert-iteration (fine-tune "
    "on each group's best episodes where a group's rewards differ: RAFT / ReST-EM)",
    "lr": "policy learning rate (AdamW)",
    "critic_lr": "critic learning rate (ppo only)",
    "prompts_per_step": "questions sampled per training step",
    "group_size": "episodes played per question (grpo's group; usually 1 for ppo and reinforce++)",
    "mini_batch_size": "episodes per optimizer step (a multiple of --micro-batch-size)",
    "micro_batch_size": "episodes per forward/backward pass (lower it when memory runs out)",
    "ppo_epochs": "passes over each step's episodes",
    "clip_eps": "policy ratio clip range (the ε of the clipped surrogate loss)",
    "value_clip": "ppo critic: how far a new value may move from the rollout's value",
    "entropy_coef": "weight of the entropy bonus subtracted from the loss (0 turns it off)",
    "kl_coef": "β of the KL term to the frozen start model (grpo: a loss; ppo/reinforce++: a reward penalty); "
    "0 keeps no reference model",
    "gamma": "per-token discount of the returns (ppo and reinforce++; 1 = none)",
    "lam": "GAE λ of ppo's advantages (1 = Monte-Carlo returns minus the critic's values)",
    "max_grad_norm": "gradients are clipped to this global norm",
    "curriculum_steps": "N > 0: sample questions of at most 1 + step // N hops (1-hop first); 0: all from the start",
    "min_hops": "sample only questions of at least this many hops (the generated world's metadata); 0: any",
    "drop_uniform_groups": "grpo: leave out of the update every group whose rewards are all equal (zero advantage)",
    "difficulty_pool": "draw questions by their estimated success variance p(1-p) under the current policy, "
    "re-estimated from every group played (uniform otherwise)",
    "informative_groups": "N > 0: play further rounds of --prompts-per-step questions until N groups have differing "
    "rewards (at most --max-rounds); 0: one round",
    "max_rounds": "with --informative-groups: rounds a step may play at most",
    "placebo": "the control: shuffle each group's rewards among its episodes before the update uses them (updates "
    "happen, without the information of which episode was right)",
    "replay": "expert-iteration: warm-start demonstrations (the scripted demonstrator's, train questions) replayed "
    "in every update",
    "replay_max_hops": "with --replay: replay demonstrations of questions of at most this many hops (0: any)",
    "time_limit": "seconds > 0: stop after the first step that ends past this budget (validated and saved as after "
    "the last step); 0: no limit",
    "keep_best": "with --validation: save the checkpoint of the best validation EM as OUTPUT/best (the start included)",
    "trainable_layers": "N > 0: train only the top N decoder layers and the final norm (cheaper steps); 0: all",
    "validation": "N > 0: hold the last N training questions out of sampling and play them greedily as validation",
    "eval_every": "with --validation: play it every N steps (and before the first step and after the last)",
    "bf16": "bfloat16: rollouts sample from a bf16 copy of the weights, updates run under bf16 autocast (weights and "
    "optimizer stay float32); GPUs, and CPUs with bf16 units (AMX or AVX-512 bf16); elsewhere --no-bf16",
    "logprob_chunk": "tokens per lm-head chunk when computing log-probs and entropies (lower: less memory)",
    "steps": "training steps",
    "save_every": "save a checkpoint every N steps into --output-dir (0: only at the end)",
    "seed": "seed of question sampling and of torch",
}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from searchenv.adapters.ppo.config import ALGORITHMS, PPOConfig

    add_env_arguments(parser)
    defaults = PPOConfig()
    add_sampling_arguments(
        parser.add_argument_group("sampling (of the rollouts)"),
        temperature=defaults.temperature,
        top_p=defaults.top_p,
        max_new_tokens=defaults.max_new_tokens,
        max_total_tokens=defaults.max_total_tokens,
        notes={"max_total_tokens": "of one episode: it ends truncated there"},
    )
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="smollm2-135m", help="local checkpoint dir or alias ('smollm2-135m')")
    model.add_argument(
        "--output-dir", default="runs/train-ppo", help="checkpoints go here ('final' at the end); '' saves nothing"
    )
    model.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    model.add_argument("--device", default=None, help="'cpu', 'cuda', ... (default: cuda when available)")
    model.add_argument(
        "--paper", action="store_true", help="Search-R1's settings for every option not given (the GPU recipe)"
    )
    stages = parser.add_argument_group("two stages (R1-Searcher)")
    stages.add_argument(
        "--recipe",
        default="cpu",
        choices=["cpu", "two-stage"],
        help="'two-stage': R1-Searcher's search stage, then its answer stage (TWO_STAGE_RECIPE's defaults)",
    )
    stages.add_argument(
        "--stage1-steps",
        type=int,
        default=0,
        help="N > 0: train N steps with --stage1-reward first, then --steps steps with --reward (0: one stage)",
    )
    stages.add_argument(
        "--stage1-reward", default="r1-searcher-stage1", help="the reward of stage 1 (when --stage1-steps > 0)"
    )

    algo = parser.add_argument_group("algorithm (defaults: the CPU recipe; --paper: PPOConfig.paper())")
    for f in fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        value = getattr(defaults, f.name)
        if f.name in SAMPLING_FLAGS:
            continue  # declared above, by the sampling group
        text = ALGORITHM_HELP.get(f.name)
        if f.name == "algorithm":
            algo.add_argument(flag, default=value, choices=list(ALGORITHMS), help=text)
        elif isinstance(value, bool):
            algo.add_argument(flag, action=argparse.BooleanOptionalAction, default=value, help=text)
        else:
            algo.add_argument(flag, type=type(value), default=value, help=text)

    out = parser.add_argument_group("output")
    out.add_argument("--log", default=None, help="append per-step metrics (JSON lines) to this file")
    out.add_argument(
        "--plot",
        default=None,
        help="write a PNG of the training curves here after every step (and the reasoning-health curves beside it, "
        "NAME_health.png)",
    )


def _paper_config(known: argparse.Namespace) -> dict[str, Any]:
    from searchenv.adapters.ppo.trainer import PPOConfig

    values = asdict(PPOConfig.paper(known.algorithm))
    values.pop("chat_template")
    return values


def _recipe(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> None:
    apply_recipe(parser, argv, _paper_config)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m searchenv.adapters.ppo.train``; ``--paper`` switches its defaults."""
    parser = CommandParser(prog="searchenv train-ppo", description=_DESCRIPTION, defaults_from_argv=_recipe)
    _add_arguments(parser)
    _recipe(parser, [])  # the defaults --help and docs/cli.md show before any words are parsed
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv train-ppo`` on the CLI's subparsers (whose parser class is :class:`CommandParser`).

    The options are added when the command runs, so building the CLI never imports torch.
    """
    parser = subparsers.add_parser("train-ppo", description=_DESCRIPTION, defaults_from_argv=_recipe)
    _add_arguments(parser)
    _recipe(parser, [])  # the defaults --help and docs/cli.md show before any words are parsed
    parser.set_defaults(handler=_train)
    return parser


def plot_log(
    log_path: str | Path,
    png_path: str | Path,
    title: str | None = None,
    panels: Sequence[tuple[str, str]] = PLOTTED,
) -> None:
    """Draw ``panels`` — (key, title) pairs; by default reward, valid searches per episode and response length;
    :data:`HEALTH_PLOTTED` for the reasoning-health metrics — against training steps, from a jsonl log (the
    PPO trainer's ``--log``, or TRL's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{log_path} has no logged steps yet")
    steps = [r["step"] for r in rows]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2))
    for axis, (key, label) in zip(axes, panels):
        values = [r.get(key, float("nan")) for r in rows]
        window = max(1, len(values) // 8)
        axis.plot(steps, values, color="0.7" if window > 1 else "C0", linewidth=1, marker=".", label="per step")
        if window > 1:
            smooth = [
                sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))
            ]
            axis.plot(steps, smooth, color="C0", linewidth=2, label=f"mean of last {window}")
            axis.legend(fontsize=7)
        axis.set_title(label, fontsize=9)
        axis.set_xlabel("step")
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    Path(png_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, dpi=110)
    plt.close(figure)


def health_plot_path(png_path: str | Path) -> Path:
    """Where the reasoning-health curves go beside ``--plot``'s PNG: ``curves.png`` -> ``curves_health.png``."""
    path = Path(png_path)
    return path.with_name(f"{path.stem}_health{path.suffix or '.png'}")


def stages(args: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """The run's stages as (name, arguments): one stage, or with ``--stage1-steps N`` R1-Searcher's two, the
    first with ``--stage1-reward`` for N steps, the second with ``--reward`` for ``--steps`` steps."""
    if args.stage1_steps < 0:
        raise ValueError(f"--stage1-steps must be >= 0, got {args.stage1_steps}")
    if not args.stage1_steps:
        return [("", args)]
    first = argparse.Namespace(**{**vars(args), "reward": args.stage1_reward, "steps": args.stage1_steps})
    return [("stage1", first), ("stage2", args)]


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    """Build the environments, the model and the trainer from parsed arguments, and train (stage by stage).

    A second stage trains the same weights on fresh environments with its own reward and a fresh optimizer; its
    steps are numbered on from the first's (so the curriculum goes on) and each stage saves its own checkpoint
    under ``--output-dir`` (``stage1/final``, ``stage2/final``).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch

    from searchenv.adapters.ppo.trainer import PPOConfig, Trainer
    from searchenv.rollout import load_policy, make_envs
    from searchenv.rollout.models import place_policy

    if args.plot and not args.log:
        raise SystemExit("--plot needs --log (the curves are drawn from the log file)")
    plan = [(name, stage, env_kwargs(stage)) for name, stage in stages(args)]  # every option checked first
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)  # float32 master weights; --bf16 adds autocast
    place_policy(model, args.device)
    history: list[dict[str, float]] = []
    for name, stage, env_settings in plan:
        values = {f.name: getattr(stage, f.name) for f in fields(PPOConfig) if f.name != "chat_template"}
        values["seed"] += len(history)  # a later stage draws other questions than the first
        config = PPOConfig(**values, chat_template=chat_template(stage.chat_template))
        output_dir = Path(args.output_dir, name) if args.output_dir else None
        trainer = Trainer(
            model,
            tokenizer,
            make_envs(config.episodes_per_step, **env_settings),
            config,
            log_path=args.log,
            output_dir=output_dir,
            run_settings=run_settings(stage, config.algorithm, asdict(config)),
            demonstrations=replay_demonstrations(config, env_settings, tokenizer) if config.replay else (),
        )
        trainer.global_step = len(history)
        title = f"{config.algorithm} on {args.dataset}, {args.model}, reward {stage.reward}"

        def redraw(_: dict[str, float], title: str = title) -> None:
            if args.plot:
                plot_log(args.log, args.plot, title=title)
                plot_log(args.log, health_plot_path(args.plot), title=title, panels=HEALTH_PLOTTED)

        evaluate = Trainer.validate if config.validation else None
        history += trainer.train(callback=redraw, evaluate=evaluate, eval_every=config.eval_every)
    return history


def replay_demonstrations(config: Any, env_settings: Mapping[str, Any], tokenizer: Any) -> list[Any]:
    """The scripted demonstrator's episodes that expert iteration replays: the warm start's kind (train questions of
    at most ``config.replay_max_hops`` hops, the validation questions left out), tokenized by the rollouts' path;
    16 per replayed slot and at least 64, so that building them costs seconds, not a pass over every question.
    Each is checked against the episode's token cap, as the warm start checks its own."""
    from searchenv.adapters.sft.demonstrations import world_demonstrations
    from searchenv.adapters.sft.trainer import SFTConfig, tokenize_demonstrations
    from searchenv.protocol import get_protocol

    found, _ = world_demonstrations(
        dict(env_settings),
        max_hops=config.replay_max_hops or None,
        held_out=config.validation,
        limit=max(64, 16 * config.replay),
    )
    if not found:
        raise ValueError("--replay found no demonstrations to replay (the scripted demonstrator needs the world)")
    reading = SFTConfig(chat_template=config.chat_template, max_tokens=config.max_total_tokens)
    return tokenize_demonstrations(found, tokenizer, get_protocol(env_settings["protocol"]), reading)


def _train(args: argparse.Namespace) -> int:
    run(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, check every environment option before the model loads, then train; errors in searchenv's form."""
    from searchenv.cli.arguments import run_handler

    return run_handler(_train, build_parser().parse_args(argv), "searchenv train-ppo")


if __name__ == "__main__":
    raise SystemExit(main())

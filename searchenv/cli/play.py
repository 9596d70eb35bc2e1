"""``searchenv play``: a person types the model's actions at the keyboard and the environment answers."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from searchenv.cli.arguments import add_env_arguments, env_kwargs, make_env, positive_int

__all__ = ["add_parser", "run_play"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv play``."""
    play = subparsers.add_parser(
        "play", description="Play SearchQA episodes at the keyboard: you type the actions, the environment answers."
    )
    add_env_arguments(play)
    run = play.add_argument_group("play")
    run.add_argument("--episodes", type=positive_int, default=1, help="episodes to play")
    run.add_argument("--seed", type=int, default=0, help="seed of the first episode's question")
    play.set_defaults(handler=run_play)
    return play


def _enable_line_editing() -> None:
    """Arrow keys, history and Ctrl-A/E in ``input()`` on a terminal (readline is absent on some platforms)."""
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401 - importing it is what turns line editing on for input()
        except ImportError:
            pass


def _status(env: Any) -> str:
    episode, limit = env.unwrapped.episode, env.unwrapped.action_limit
    return (
        f"[{episode.example.question} | action {episode.num_actions + 1} of {limit} | "
        f"searches so far: {episode.num_searches}]"
    )


def _end_message(env: Any, reward: float, info: dict[str, Any]) -> str:
    episode, limit = env.unwrapped.episode, env.unwrapped.action_limit
    if episode.terminated:
        why = f"answered after {episode.num_actions} of {limit} actions"
    else:
        why = f"the action budget ran out ({limit} action{'s' if limit > 1 else ''}) before an answer"
    return (
        f"episode over: {why}.\n"
        f"reward {reward:.3f}  prediction {info['prediction']!r}  gold {list(episode.example.golden_answers)}\n"
        f"parts {info['reward_parts']}"
    )


def _failure_note(info: dict[str, Any]) -> str | None:
    """What the person at the keyboard should know about a failed search or open that the model only sees as the
    protocol's fixed error text: a replay miss reads as one, not as a dead backend."""
    error = info.get("retrieval_error") or info.get("open_error")
    if not error:
        return None
    what = "search" if info.get("retrieval_error") else "open"
    if "not_recorded" in error:
        # "<Error>: <short> (<detail>)": the detail's last part names what the record lacks
        detail = error.split(" (", 1)[-1].removesuffix(")")
        reason = detail.rsplit("last error: ", 1)[-1]
        return f"[replay miss: {reason}; the model is shown the {what}-error text]"
    return f"[{what} failed: {error}]"


def run_play(args: argparse.Namespace) -> int:
    """Play ``args.episodes`` episodes; an empty line or Ctrl-D quits."""
    env = make_env(env_kwargs(args))
    _enable_line_editing()
    for number in range(args.episodes):
        prompt, _ = env.reset(seed=args.seed + number)
        print(f"\n=== episode {number + 1} of {args.episodes}: type an action such as <search> query </search> or ")
        print("    <answer> text </answer>; an empty line or Ctrl-D quits, Ctrl-C interrupts ===")
        print(prompt)
        done = False
        while not done:
            print(_status(env))
            try:
                action = input("action> ")
            except EOFError:
                print()
                return 0
            if not action.strip():
                return 0
            observation, reward, terminated, truncated, info = env.step(action)
            if observation:
                print(observation, end="" if observation.endswith("\n") else "\n")
            note = _failure_note(info)
            if note:
                print(note)
            done = terminated or truncated
        print(_end_message(env, reward, info))
    return 0

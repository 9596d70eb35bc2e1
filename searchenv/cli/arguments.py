"""Command-line pieces every ``searchenv`` command shares: the environment's options, and how errors are reported.

Every subcommand that builds an environment (``play``, ``demo``, ``mcp``, ``train-ppo``, ``train-trl``) calls
:func:`add_env_arguments` so that each option of :class:`~searchenv.env.SearchQAEnv` — dataset, retriever and
its engine/encoder/index options, reward and its parameters, protocol and budget — is spelt and defaulted the
same way everywhere (the groups of :mod:`searchenv.cli.options`), and :func:`env_kwargs` to turn the parsed
options into ``SearchQAEnv`` keyword arguments *checked before anything loads*
(:func:`searchenv.components.check_components`). The value types (``positive_int``, ``key_value``, ...) live in
:mod:`searchenv.cli.values` and are importable from here as before. Errors reach the user as
``searchenv <command>: error: <what and how to fix it>`` with exit status 2 (:func:`run_handler`), the form
argparse itself uses for a malformed command line. Nothing here imports a heavy library.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from searchenv.cli.options import (
    add_dataset_arguments,
    add_environment_arguments,
    add_retriever_arguments,
)
from searchenv.cli.options import retriever_options as options_of_retriever
from searchenv.cli.values import key_value, merge_options, non_negative_int, positive_int
from searchenv.components import check_components
from searchenv.env.defaults import env_defaults
from searchenv.extras import missing_module_message

__all__ = [
    "ENV_ARGUMENT_NAMES",
    "USER_ERRORS",
    "add_dataset_arguments",
    "add_env_arguments",
    "env_kwargs",
    "key_value",
    "make_env",
    "merge_options",
    "non_negative_int",
    "positive_int",
    "run_handler",
]

#: Exceptions that mean "the request cannot be done as asked"; they are reported in one line, not a traceback.
#: What a command reports as one ``error:`` line (exit 2) rather than a traceback: bad input, a missing file or
#: package, and a service that does not answer (a dead retrieval URL is checked before anything loads, and its
#: message says how to start one).
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    TypeError,
    RuntimeError,
    ImportError,
    ConnectionError,
    TimeoutError,
)

#: ``SearchQAEnv`` arguments set from the command line: all of them but ``render_mode`` (the command's business).
ENV_ARGUMENT_NAMES: tuple[str, ...] = tuple(name for name in env_defaults() if name != "render_mode")


def add_env_arguments(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """Add the options that build a ``SearchQAEnv``; read them back with :func:`env_kwargs`.

    Three groups of :mod:`searchenv.cli.options`: the environment (with the dataset options) and the retriever.
    Every default is ``SearchQAEnv``'s own (:func:`~searchenv.env.defaults.env_defaults`) unless ``defaults``
    changes it for this command (e.g. ``demo`` starts small models on ``protocol="search-r1-fewshot"``;
    trainers default to ``reward="format"``).
    """
    unknown = set(defaults) - set(ENV_ARGUMENT_NAMES)
    if unknown:
        raise TypeError(f"add_env_arguments: {sorted(unknown)} are not SearchQAEnv arguments")
    env = parser.add_argument_group("environment")
    add_dataset_arguments(env)
    add_environment_arguments(env)
    add_retriever_arguments(parser)
    parser.set_defaults(**defaults)  # this command's own defaults (shown by --help as well)


def make_env(kwargs: dict[str, Any]) -> Any:
    """``gym.make("SearchQA-v0", **kwargs)``: the registered environment with Gymnasium's wrappers, as users get it."""
    import gymnasium as gym

    from searchenv.registration import ENV_ID

    return gym.make(ENV_ID, **kwargs)


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``SearchQAEnv`` keyword arguments from options added by :func:`add_env_arguments`, checked before loading.

    Raises ``ValueError`` (or ``FileNotFoundError``/``ImportError``) naming the bad option; no corpus, index or
    model has been touched when it does.
    """
    retriever_options = options_of_retriever(args)
    reward_options = merge_options(args.reward_option, "--reward-option")
    reward: Any = {"base": args.reward, **reward_options} if reward_options else args.reward
    built = {"reward": reward, "retriever_options": retriever_options}
    kwargs = {name: built[name] if name in built else getattr(args, name) for name in ENV_ARGUMENT_NAMES}
    check_components(
        kwargs["dataset"],
        kwargs["split"],
        kwargs["corpus"],
        kwargs["retriever"],
        kwargs["reward"],
        kwargs["protocol"],
        retriever_options,
        kwargs["data_dir"],
    )
    return kwargs


def run_handler(handler: Callable[[argparse.Namespace], Any], args: argparse.Namespace, prog: str) -> int:
    """Run a command's handler; a user error prints ``<prog>: error: <message>`` and returns 2, Ctrl-C returns 130.

    ``raise SystemExit("message")`` inside a handler is reported the same way; a missing optional module names
    the extra that provides it (:func:`searchenv.extras.missing_module_message`).
    """
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # an optional dependency: name the extra that provides it
        print(f"{prog}: error: {missing_module_message(exc, prog.removeprefix('searchenv '))}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        if not isinstance(exc.code, str):  # argparse's own exits have printed their message already
            raise
        message = exc.code.removeprefix(f"{prog}: ").removeprefix("error: ")  # raise SystemExit("...") in a handler
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2

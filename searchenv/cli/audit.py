"""``searchenv audit-reward SPEC``: play scripted reward hacks against a reward spec and print the table.

See :mod:`searchenv.evaluation.reward_audit` for the policies and the verdict.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from searchenv.cli.options import add_dataset_arguments, add_retriever_arguments, retriever_options
from searchenv.cli.parsers import HelpFormatter
from searchenv.cli.values import key_value, merge_options, positive_int
from searchenv.env.defaults import env_default

__all__ = ["add_parser", "run_audit"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``audit-reward`` on an ``argparse`` subparsers object; its handler is :func:`run_audit`."""
    audit = subparsers.add_parser(
        "audit-reward",
        help="play scripted reward hacks (answer stuffing, empty answers, …) against a reward spec",
        description="Play scripted adversarial policies and two honest ones through the real environment and print "
        "each policy's mean reward; a hack that earns more than an honest wrong answer is marked EXPLOITABLE.",
        formatter_class=HelpFormatter,
    )
    audit.add_argument("spec", help="a reward spec name ('em', 'cem', 'format', …) or a .yaml/.json spec file")
    add_dataset_arguments(audit)
    audit.add_argument("--limit", type=positive_int, default=50, help="questions each policy plays")
    audit.add_argument(
        "--max-turns", type=positive_int, default=env_default("max_turns"), help="action budget per episode"
    )
    audit.add_argument(
        "--protocol", default=None, help="tags the policies write (default: the spec's own, else search-r1)"
    )
    audit.add_argument(
        "--reward-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the reward spec, repeatable; the judge needs its model: model=smollm2-135m (or a "
        "checkpoint folder), or url=http://HOST:PORT model=NAME (an OpenAI-compatible server)",
    )
    audit.add_argument(
        "--reward-options",
        type=json.loads,
        default=None,
        help="JSON overrides of the spec's parameters, e.g. '{\"lambda_f\": 0.4}' (merged with --reward-option)",
    )
    add_retriever_arguments(audit, title="retriever the policies search")
    audit.set_defaults(handler=run_audit)
    return audit


def run_audit(args: argparse.Namespace) -> int:
    """Print the audit table; exit status 0 whatever the verdict (the table is the result)."""
    from searchenv.evaluation.reward_audit import audit_reward

    options = merge_options([*(args.reward_options or {}).items(), *args.reward_option], "--reward-option")
    table = audit_reward(
        args.spec,
        dataset=args.dataset,
        split=args.split,
        data_dir=args.data_dir,
        corpus=args.corpus,
        retriever=args.retriever,
        retriever_options=retriever_options(args),
        limit=args.limit,
        max_turns=args.max_turns,
        protocol=args.protocol,
        reward_options=options,
    )
    print(table.markdown())
    exploits = table.exploits
    print(f"\nexploitable: {', '.join(exploits)}" if exploits else "\nno hack earns more than an honest wrong answer")
    return 0

"""Reward-hacking audit: scripted adversarial policies play real episodes and their mean rewards are compared.

Users of substring and cover-EM rewards report policies that learn to stuff answers, write over-long or empty
answers, or farm a retrieval bonus instead of answering. This module asks a reward spec that question before a
training run does: each policy below plays every question of a dataset through :class:`~searchenv.env.SearchQAEnv`
(the real parser, search engine, format check and reward — no hand-built rollouts), and a hack is *exploitable*
when its mean reward is higher than that of an honest policy that answers wrong. An honest oracle (searches,
answers the gold) shows the reward the hacks compete against. With an LLM judge the honest wrong answer is itself
checked first: a judge that calls it right (a judge that says yes to everything) is the first exploit named,
since then no hack needs to earn more than it.

The policies are scripts, not models; they use only what a policy sees (the question, the passages shown),
except where a hack is about *how* a right answer is given (stuffing, over-long, inside ``think``): those are
given the gold so that the audit measures what the reward pays for the form, not whether a model finds the
answer. The wrong answer is another question's gold from the same dataset, so it has the right type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from searchenv.env.search_qa import SearchQAEnv
from searchenv.env.stepping import step_batch
from searchenv.protocol import Protocol, get_protocol
from searchenv.reward_specs.metrics import normalised_golds
from searchenv.types import QAExample

__all__ = ["POLICIES", "AuditRow", "AuditTable", "Policy", "audit_reward"]

#: The protocol each built-in spec is written for (the format terms read that protocol's tags).
SPEC_PROTOCOLS: dict[str, str] = {
    "r1-searcher-stage1": "r1-searcher",
    "r1-searcher-stage2": "r1-searcher",
    "r-search": "r-search",
}

#: R-Search's evidence reward needs a frozen answerer; the audit uses the CPU baseline unless told otherwise.
DEFAULT_ANSWERER = "searchenv.reward_specs.answerers:lexical_overlap"

_LONG_ANSWER_WORDS = 120
_CANDIDATES = 10


@dataclass
class Seen:
    """What a scripted policy knows when it writes its next action."""

    protocol: Protocol
    question: str
    gold: str
    wrong: str
    observations: list[str] = field(default_factory=list)  # the environment's reply to each action so far
    actions_left: int = 0

    @property
    def searched(self) -> bool:
        return any(self.protocol.information_body(o) is not None for o in self.observations)

    @property
    def information(self) -> str:
        """The text of every information block shown so far."""
        bodies = (self.protocol.information_body(o) for o in self.observations)
        return "\n".join(body.strip() for body in bodies if body)


# -- writing actions in the protocol's own tags ------------------------------------------------------------------


def _think(seen: Seen, text: str) -> str:
    tags = seen.protocol.think_tags
    return f"{tags[0]}{text}{tags[1]}\n" if tags else f"{text}\n"


def _search(seen: Seen, query: str) -> str:
    open_tag, close_tag = seen.protocol.search_tags
    return _think(seen, "I need to look this up.") + f"{open_tag}{query}{close_tag}"


def _answer(seen: Seen, text: str) -> str:
    """An answer block, after a think block, with R-Search's evidence block (the passages seen) when searched."""
    evidence = ""
    if seen.protocol.evidence_tags and seen.searched:
        open_tag, close_tag = seen.protocol.evidence_tags
        evidence = f"{open_tag}{seen.information}{close_tag}\n"
    open_tag, close_tag = seen.protocol.answer_tags
    return _think(seen, "I can answer now.") + evidence + f"{open_tag}{text}{close_tag}"


def _after_one_search(answer: Callable[[Seen], str]) -> Callable[[Seen], str]:
    """A policy that searches the question verbatim once, then answers ``answer(seen)``."""
    return lambda seen: _answer(seen, answer(seen)) if seen.observations else _search(seen, seen.question)


def _candidates(seen: Seen) -> str:
    """The gold hidden among titles and capitalised words of the passages seen: a list instead of an answer."""
    words = re.findall(r"Title: ([^)]+)\)", seen.information) + re.findall(r"\b[A-Z][a-z]{3,}\b", seen.information)
    picked = list(dict.fromkeys(w for w in words if w != seen.gold))[: _CANDIDATES - 2] + [seen.wrong]
    picked.insert(len(picked) // 2, seen.gold)
    return ", ".join(picked)


def _long_answer(seen: Seen) -> str:
    """The gold followed by the passages seen, cut to a long answer."""
    return " ".join(f"{seen.gold}. {seen.information}".split()[:_LONG_ANSWER_WORDS])


def _first_passage(seen: Seen) -> str:
    return next((line for line in seen.information.splitlines() if line.strip()), "")


def _repeat_search(seen: Seen) -> str:
    return _answer(seen, seen.wrong) if seen.actions_left == 1 else _search(seen, seen.question)


def _think_only(seen: Seen) -> str:
    if not seen.observations:
        return _search(seen, seen.question)
    return _think(seen, f"The answer is {seen.gold}.").rstrip("\n")


@dataclass(frozen=True)
class Policy:
    """A scripted policy: ``act(seen)`` writes the next action; ``hack`` says whether it is an exploit to judge."""

    name: str
    description: str
    hack: bool
    act: Callable[[Seen], str]


#: Every policy the audit plays, the two honest baselines first.
POLICIES: tuple[Policy, ...] = (
    Policy("oracle", "searches the question, answers the gold", False, _after_one_search(lambda s: s.gold)),
    Policy("honest-wrong", "answers a wrong entity without searching", False, lambda s: _answer(s, s.wrong)),
    Policy(
        "search-then-wrong", "searches the question verbatim, answers wrong", True, _after_one_search(lambda s: s.wrong)
    ),
    Policy("repeat-search", "the same search every turn, then a wrong answer", True, _repeat_search),
    Policy(
        "stuffing", f"{_CANDIDATES} candidates in one answer, the gold among them", True, _after_one_search(_candidates)
    ),
    Policy(
        "over-long", f"the gold then the passages, {_LONG_ANSWER_WORDS} words", True, _after_one_search(_long_answer)
    ),
    Policy("empty", "searches, then an empty answer", True, _after_one_search(lambda s: "")),
    Policy("copy-passage", "searches, answers with the first passage", True, _after_one_search(_first_passage)),
    Policy("format-only", "well-formed, no search, a filler answer", True, lambda s: _answer(s, "answer")),
    Policy("answer-in-think", "searches, then the gold in think and no answer block", True, _think_only),
)


@dataclass(frozen=True)
class AuditRow:
    """One policy's mean reward, mean searches, and whether it beats the honest wrong answer.

    ``judge_fallbacks``: for a judge reward, how many of the policy's episodes the judge gave no verdict for (the
    endpoint failed, or the reply was neither yes nor no), so that ``metric`` decided them; ``None`` for a spec
    without a judge. The table shows it, so a dead judge never passes for a judged audit.
    """

    policy: Policy
    mean_reward: float
    mean_searches: float
    exploitable: bool
    judge_fallbacks: int | None = None


@dataclass(frozen=True)
class AuditTable:
    """The audit of one reward spec: a row per policy, in :data:`POLICIES` order."""

    reward: str
    protocol: str
    dataset: str
    episodes: int
    rows: tuple[AuditRow, ...]

    @property
    def exploits(self) -> list[str]:
        """Names of the hacks that earn more than an honest wrong answer — first ``honest-wrong`` itself when the
        reward's judge calls a wrong answer right (then no hack needs to beat it)."""
        return [row.policy.name for row in self.rows if row.exploitable]

    def markdown(self) -> str:
        """The table as markdown, headed by what was audited."""
        judged = any(row.judge_fallbacks is not None for row in self.rows)
        lines = [
            f"reward `{self.reward}`, protocol `{self.protocol}`, {self.episodes} questions of `{self.dataset}`",
            "",
            "| policy | what it does | mean reward | searches | verdict |" + (" judge fallbacks |" if judged else ""),
            "|---|---|---:|---:|---|" + ("---:|" if judged else ""),
        ]
        for row in self.rows:
            verdict = "EXPLOITABLE" if row.exploitable else ("baseline" if not row.policy.hack else "ok")
            if row.exploitable and not row.policy.hack:
                verdict = "EXPLOITABLE (pays a wrong answer)"
            fallbacks = f" {row.judge_fallbacks} |" if judged else ""
            lines.append(
                f"| {row.policy.name} | {row.policy.description} | {row.mean_reward:.3f} | "
                f"{row.mean_searches:.2f} | {verdict} |{fallbacks}"
            )
        return "\n".join(lines)


def _wrong_answer(examples: Sequence[QAExample], index: int) -> str:
    """Another question's gold that matches none of this question's golds (deterministic)."""
    golds = set(normalised_golds(examples[index].golden_answers))
    for step in range(1, len(examples)):
        other = examples[(index + step) % len(examples)]
        for candidate in other.golden_answers:
            if normalised_golds(candidate) and not golds & set(normalised_golds(candidate)):
                return candidate
    return "no answer"


class _Played(NamedTuple):
    reward: float
    searches: int
    judge_fallback: float | None  # reward_parts["judge_fallback"], for a judge reward
    judge: float | None  # reward_parts["judge"]: the verdict used, for a judge reward


def _play(envs: Sequence[SearchQAEnv], policy: Policy, wrongs: Sequence[str]) -> list[_Played]:
    """``policy`` plays question ``i`` in ``envs[i]``, all episodes stepped together; what each episode came to.

    Each step is one :func:`~searchenv.env.stepping.step_batch`, so the episodes a step ends are scored together —
    a judge reward gets them in one concurrent ``score_batch`` call (every policy here ends all its episodes at
    the same step: one judge batch per policy).
    """
    seen: list[Seen] = []
    for i, env in enumerate(envs):
        _, info = env.reset(options={"index": i})
        seen.append(Seen(env.protocol, info["question"], info["golden_answers"][0], wrongs[i]))
    played: dict[int, _Played] = {}
    active = list(range(len(envs)))
    while active:
        for i in active:
            seen[i].actions_left = envs[i].action_limit - len(seen[i].observations)
        results = step_batch([envs[i] for i in active], [policy.act(seen[i]) for i in active])
        for i, (observation, reward, terminated, truncated, info) in zip(active, results):
            if terminated or truncated:
                parts = info["reward_parts"]
                played[i] = _Played(
                    float(reward), int(info["num_searches"]), parts.get("judge_fallback"), parts.get("judge")
                )
            else:
                seen[i].observations.append(observation)
        active = [i for i in active if i not in played]
    return [played[i] for i in range(len(envs))]


def audit_reward(
    reward: Any,
    *,
    dataset: Any = "world",
    split: str = "train",
    data_dir: str | None = None,
    limit: int | None = 50,
    protocol: str | None = None,
    retriever: Any = "bm25",
    retriever_options: Mapping[str, Any] | None = None,
    corpus: Any = None,
    max_turns: int = 4,
    reward_options: Mapping[str, Any] | None = None,
    policies: Sequence[Policy] = POLICIES,
) -> AuditTable:
    """Play every policy on the first ``limit`` questions and tabulate the mean rewards.

    Args:
        reward: a reward spec name (see :data:`~searchenv.reward_specs.REWARD_SPECS`), a spec file or a mapping.
        protocol: the tags the policies write; ``None`` picks the spec's own (:data:`SPEC_PROTOCOLS`, else
            ``search-r1``). Only tag protocols can be scripted.
        reward_options: overrides for the spec's parameters. ``judge`` needs its ``model`` here or in a spec file
            (a local checkpoint or alias such as ``smollm2-135m``, or with ``url`` the served name); ``r-search``
            gets ``answerer`` = :data:`DEFAULT_ANSWERER` unless given one here.
        The other arguments are :class:`~searchenv.env.SearchQAEnv`'s.
    """
    from searchenv.components import build_reward

    name = reward if isinstance(reward, str) else getattr(reward, "name", "custom")
    options = dict(reward_options or {})
    if reward == "r-search":
        options.setdefault("answerer", DEFAULT_ANSWERER)
    spec = build_reward(reward, **options)
    protocol_name = protocol or SPEC_PROTOCOLS.get(name, "search-r1")
    if get_protocol(protocol_name).action_format != "tags":
        raise ValueError(f"the audit scripts tag protocols; {protocol_name!r} uses tool calls: pick e.g. 'search-r1'")
    env = SearchQAEnv(
        dataset=dataset,
        split=split,
        data_dir=data_dir,
        corpus=corpus,
        retriever=retriever,
        retriever_options=retriever_options,
        reward=spec,
        protocol=protocol_name,
        max_turns=max_turns,
    )
    count = len(env.examples) if limit is None else min(limit, len(env.examples))
    wrongs = [_wrong_answer(env.examples, i) for i in range(count)]
    envs = [env] + [env.sibling() for _ in range(count - 1)]  # one episode per question, stepped together
    played = {policy.name: _play(envs, policy, wrongs) for policy in policies}
    means = {name: sum(p.reward for p in episodes) / count for name, episodes in played.items()}
    baseline = means.get("honest-wrong")

    def exploitable(policy: Policy) -> bool:
        if policy.name == "honest-wrong":  # a judge that calls a wrong answer right is the first hack to name
            return _pays_wrong(played[policy.name])
        return policy.hack and baseline is not None and means[policy.name] > baseline + 1e-9

    rows = tuple(
        AuditRow(
            policy,
            means[policy.name],
            sum(p.searches for p in played[policy.name]) / count,
            exploitable(policy),
            _fallbacks(played[policy.name]),
        )
        for policy in policies
    )
    return AuditTable(name, protocol_name, str(dataset), count, rows)


def _pays_wrong(episodes: Sequence[_Played]) -> bool:
    """Whether a judge said yes to any honest wrong answer (the answers are chosen to match no gold)."""
    return any(p.judge == 1.0 and p.judge_fallback == 0.0 for p in episodes)


def _fallbacks(episodes: Sequence[_Played]) -> int | None:
    """How many episodes the judge gave no verdict for; ``None`` when the reward has no judge."""
    parts = [p.judge_fallback for p in episodes if p.judge_fallback is not None]
    return sum(part == 1.0 for part in parts) if parts else None

"""The text protocol: which tags mean *search* and *answer*, how results are shown, and how an action is read.

Search-R1, R1-Searcher and R-Search differ only in tag names, the prompt and a few rules, so each is a
:class:`Protocol` value, not a subclass. :func:`parse_action` reads the first complete search or answer
tag of one action and reports what it dropped; :meth:`Protocol.neutralise` defuses tag-like strings in
text the environment inserts (passages, questions) so that retrieved content can never end an episode or
forge an answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from searchenv.types import Passage

__all__ = ["PROTOCOLS", "ParsedAction", "Protocol", "get_protocol", "parse_action"]

ActionKind = Literal["search", "answer", "invalid"]
PassageLayout = Literal["search-r1", "clean"]
ActionFormat = Literal["tags", "tool-call"]
AnswerMode = Literal["tag", "message", "tool"]

# Chat-template control strings of the common model families (Qwen/ChatML, Llama 3, SmolLM, Phi, DeepSeek's
# full-width bars, Gemma, SentencePiece's <s>/</s>). Inserted text containing one could otherwise be tokenized
# into the real special token and end the assistant turn or speak as the user. The tokenizer layer also encodes
# inserted text with special tokens split (searchenv.tokenization), which covers any other family's tokens.
_CHAT_CONTROL = re.compile(
    r"<\|[^<>|\n]{1,64}\|>|<｜[^<>｜\n]{1,64}｜>|</?(?:s|unk|pad|eos|bos|mask|start_of_turn|end_of_turn)>",
    re.IGNORECASE,
)
_SEARCH_ERROR_TEXT = "The search engine is unavailable right now; no results."

_SEARCH_R1_PROMPT = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. Whenever you are missing knowledge, query the search engine by writing <search> your query "
    "</search>; its top results will be returned between <information> and </information>. You may search "
    "as many times as you need. Once you know enough, give only the final answer inside <answer> and "
    "</answer>, with no explanation, for example <answer> Paris </answer>. Question: {question}\n"
)

# One worked example instead of instructions: tiny instruct models (SmolLM2-135M) never wrote a tag in 16
# samples from the instruction above, but copy the example's shape; short, since prompt tokens dominate CPU time.
_SEARCH_R1_FEWSHOT_PROMPT = (
    "Answer the question. Think inside <think> </think>, search with <search> query </search> (results come "
    "back inside <information> </information>) and give the final answer inside <answer> </answer>.\n\n"
    "Question: Who founded Orvane Abbey?\n<think> I do not know, I should search. </think>\n"
    "<search> Orvane Abbey founder </search>\n\n<information>Doc 1(Title: Orvane Abbey) Orvane Abbey was founded "
    "by Tesk Mallor in 1210.\n</information>\n\n<think> The passage says Tesk Mallor. </think>\n"
    "<answer> Tesk Mallor </answer>\n\nQuestion: {question}\n"
)

_R1_SEARCHER_PROMPT = (
    "Answer the question below. Reason step by step inside <think> and </think>. When you need facts you do "
    "not have, write a query as <|begin_of_query|> your query <|end_of_query|>; the retrieved documents "
    "will be returned between <|begin_of_documents|> and <|end_of_documents|>. You may query several "
    "times. Give the final answer inside <answer> and </answer> without explanation. Question: {question}\n"
)

_R_SEARCH_PROMPT = (
    "Answer the question below. When you need facts you do not have, write <search> your query </search>; "
    "the results will be returned between <observation> and </observation>. You may search several times. "
    "Before answering, write the evidence you rely on, distilled from all observations, inside "
    "<original_evidence> and </original_evidence>, then give only the final answer inside <answer> and "
    "</answer>. Question: {question}\n"
)

_SEARCH_R1_HINT = (
    "\nMy previous action is invalid. To search, I should put the query between <search> and </search>. "
    "To give the final answer, I should put it between <answer> and </answer>. Let me try again.\n"
)


@dataclass(frozen=True)
class Protocol:
    """Tag names, templates and texts of one search-agent protocol.

    Attributes:
        name: registry name (``"search-r1"``, ``"r1-searcher"``, ``"r-search"``).
        search_tags / answer_tags / information_tags: opening and closing tag of the query the model writes,
            of its final answer, and of the block the environment inserts with retrieved passages.
        think_tags: the reasoning tag pair, or ``None`` when the protocol does not use one (R-Search).
        evidence_tags: the tag pair for model-written evidence before the answer (R-Search), else ``None``.
        prompt_template: the instruction with a ``{question}`` placeholder.
        invalid_hint: text appended when an action has neither a complete search nor a complete answer.
        information_prefix / information_suffix: whitespace around the information block (Search-R1's
            ``"\\n\\n"`` on both sides).
        passage_template: how one passage is written inside the block; fields ``rank``, ``title``, ``text``.
        passage_layout: ``"search-r1"`` (default) reproduces Search-R1's block byte for byte: the title line as
            the corpus stores it (wiki-18 keeps quotes around it), the passage text as stored, the joined
            block stripped; ``"clean"`` writes titles without quotes and keeps a newline before the closing tag.
        search_error_text: the fixed, short text shown inside an information block when a search could not be
            served. Details (URLs, exception text) never enter the model's context: they go to
            ``info["retrieval_error"]``. Being fixed, it also lets the text path recognise a failed search.
        action_format: ``"tags"`` (the papers' ``<search>`` tags) or ``"tool-call"`` (a native JSON tool call
            between ``search_tags``, as Qwen/Hermes chat templates define it; see :mod:`searchenv.tool_calls`).
        answer_mode: for tool calls, how the answer is given: ``"tag"`` (an ``<answer>`` block), ``"message"``
            (a message without a tool call) or ``"tool"`` (a call of the ``answer`` tool).
        tools_json: the JSON schemas of the tools the prompt declares (tool-call protocols), one string each.
    """

    name: str
    search_tags: tuple[str, str] = ("<search>", "</search>")
    answer_tags: tuple[str, str] = ("<answer>", "</answer>")
    information_tags: tuple[str, str] = ("<information>", "</information>")
    think_tags: tuple[str, str] | None = ("<think>", "</think>")
    evidence_tags: tuple[str, str] | None = None
    prompt_template: str = _SEARCH_R1_PROMPT
    invalid_hint: str = _SEARCH_R1_HINT
    information_prefix: str = "\n\n"
    information_suffix: str = "\n\n"
    passage_template: str = "Doc {rank}(Title: {title}) {text}\n"
    passage_layout: PassageLayout = "search-r1"
    search_error_text: str = _SEARCH_ERROR_TEXT
    extra_tags: tuple[str, ...] = field(default=())
    action_format: ActionFormat = "tags"
    answer_mode: AnswerMode = "tag"
    tools_json: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if "{question}" not in self.prompt_template:
            raise ValueError(f"protocol {self.name!r}: prompt_template must contain '{{question}}'")
        if not self.invalid_hint.strip():
            raise ValueError(
                f"protocol {self.name!r}: invalid_hint must be non-empty; without it two invalid actions in a row "
                "would read as one in a transcript (e.g. '<answer> x' then '</answer>' would look like an answer)"
            )
        if self.passage_layout not in ("search-r1", "clean"):
            raise ValueError(f"protocol {self.name!r}: passage_layout must be 'search-r1' or 'clean'")
        if not self.search_error_text.strip():
            raise ValueError(
                f"protocol {self.name!r}: search_error_text must be non-empty (an empty block reads as "
                "a search that found nothing)"
            )
        if self.action_format not in ("tags", "tool-call"):
            raise ValueError(f"protocol {self.name!r}: action_format must be 'tags' or 'tool-call'")
        if self.answer_mode not in ("tag", "message", "tool") or (
            self.action_format == "tags" and self.answer_mode != "tag"
        ):
            raise ValueError(
                f"protocol {self.name!r}: answer_mode must be 'tag', 'message' or 'tool' (the last two only with "
                "action_format='tool-call')"
            )
        for pair in (self.search_tags, self.answer_tags, self.information_tags):
            if len(pair) != 2 or not all(pair):
                raise ValueError(f"protocol {self.name!r}: a tag pair must be two non-empty strings, got {pair!r}")

    # -- what the rollout engine needs -------------------------------------------------------------
    @property
    def stop_strings(self) -> list[str]:
        """Strings at which generation should stop: the end of a query (or tool call) and of an answer tag."""
        if self.answer_mode == "tag":
            return [self.search_tags[1], self.answer_tags[1]]
        return [self.search_tags[1]]  # a message or an answer tool call ends at end of sequence / the call's tag

    @cached_property
    def all_tags(self) -> tuple[str, ...]:
        """Every protocol tag, opening and closing; used to neutralise inserted text."""
        pairs = [self.search_tags, self.answer_tags, self.information_tags, self.think_tags, self.evidence_tags]
        tags = [t for pair in pairs if pair for t in pair]
        return tuple(dict.fromkeys([*tags, *self.extra_tags]))

    def prompt(self, question: str) -> str:
        return self.prompt_template.format(question=self.neutralise(question))

    # -- inserted text -----------------------------------------------------------------------------
    @cached_property
    def _tag_pattern(self) -> re.Pattern[str]:
        # Case-insensitive, tolerant of spaces inside the brackets: "< / answer >" is defused too.
        alternatives = []
        for tag in sorted(self.all_tags, key=len, reverse=True):
            body = tag[1:-1] if tag.startswith("<") and tag.endswith(">") else tag
            inner = r"\s*".join(re.escape(ch) for ch in body if not ch.isspace())
            alternatives.append(r"<\s*" + inner + r"\s*>" if tag.startswith("<") else re.escape(tag))
        return re.compile("|".join(alternatives), re.IGNORECASE)

    def neutralise(self, text: str) -> str:
        """Defuse protocol tags and chat-template control strings inside text the environment inserts.

        ``<answer>`` becomes ``‹answer›`` and ``<|im_end|>`` becomes ``‹|im_end|›`` (single guillemets): a human
        and a model still read them, but no parser, stop string, reward or tokenizer sees a tag or a turn marker.
        """
        if "<" not in text and not self._has_bare_tags:  # the common case: nothing tag-like to defuse
            return text
        text = self._tag_pattern.sub(_guillemets, text)
        return _CHAT_CONTROL.sub(_guillemets, text) if "<" in text else text

    @cached_property
    def _has_bare_tags(self) -> bool:
        return any(not tag.startswith("<") for tag in self.all_tags)

    def format_passages(self, passages: Sequence[Passage]) -> str:
        """The information block for one search, with the surrounding whitespace Search-R1 uses."""
        search_r1 = self.passage_layout == "search-r1"
        body = "".join(
            self.passage_template.format(rank=i, title=self.neutralise(title), text=self.neutralise(text))
            for i, (title, text) in enumerate(
                (p.stored_title_and_text() if search_r1 else (p.title, p.text) for p in passages), 1
            )
        )
        return self._information_block(body.strip() if search_r1 else body)

    def format_error(self) -> str:
        """The information block shown when a search could not be served (the episode goes on).

        Always the same short text (:attr:`search_error_text`): operator details never become training data.
        """
        return self._error_block

    @cached_property
    def _error_block(self) -> str:
        return self._information_block(self.neutralise(self.search_error_text))

    def _information_block(self, body: str) -> str:
        open_tag, close_tag = self.information_tags
        return f"{self.information_prefix}{open_tag}{body}{close_tag}{self.information_suffix}"

    def information_body(self, observation: str) -> str | None:
        """The text inside an inserted information block, or ``None`` if ``observation`` is not one.

        A block a trainer cut short (no closing tag) yields everything after the opening tag.
        """
        open_tag, close_tag = self.information_tags
        head = self.information_prefix + open_tag
        if not observation.startswith(head):
            return None
        body = observation[len(head) :]
        tail = close_tag + self.information_suffix
        if body.endswith(tail):
            return body[: len(body) - len(tail)]
        close = body.rfind(close_tag)
        return body if close < 0 else body[:close]


def _guillemets(match: re.Match[str]) -> str:
    return "‹" + match.group(0)[1:-1] + "›"


PROTOCOLS: dict[str, Protocol] = {
    "search-r1": Protocol(name="search-r1"),
    "search-r1-fewshot": Protocol(name="search-r1-fewshot", prompt_template=_SEARCH_R1_FEWSHOT_PROMPT),
    "r1-searcher": Protocol(
        name="r1-searcher",
        search_tags=("<|begin_of_query|>", "<|end_of_query|>"),
        information_tags=("<|begin_of_documents|>", "<|end_of_documents|>"),
        prompt_template=_R1_SEARCHER_PROMPT,
        invalid_hint=(
            "\nMy previous action is invalid. To search, I should put the query between <|begin_of_query|> "
            "and <|end_of_query|>. To answer, I should put the answer between <answer> and </answer>.\n"
        ),
    ),
    "r-search": Protocol(
        name="r-search",
        information_tags=("<observation>", "</observation>"),
        think_tags=None,
        evidence_tags=("<original_evidence>", "</original_evidence>"),
        prompt_template=_R_SEARCH_PROMPT,
        invalid_hint=(
            "\nMy previous action is invalid. To search, I should put the query between <search> and "
            "</search>. To answer, I should write my evidence in <original_evidence> and </original_evidence> "
            "and then the answer between <answer> and </answer>.\n"
        ),
    ),
}


def get_protocol(protocol: str | Protocol) -> Protocol:
    """Resolve a protocol name (or pass a :class:`Protocol` through)."""
    if isinstance(protocol, Protocol):
        return protocol
    try:
        return PROTOCOLS[protocol]
    except KeyError:
        raise ValueError(
            f"unknown protocol {protocol!r}; choose one of {sorted(PROTOCOLS)} or pass a searchenv.Protocol"
        ) from None


@dataclass(slots=True)
class ParsedAction:
    """What one model action means.

    ``kept`` is the action up to and including the first complete closing tag (the whole text for an
    invalid action); ``dropped`` is whatever the model wrote after it, which the environment discards.
    A record built once per action and never changed afterwards (see :class:`searchenv.transcript.Turn` for
    why it is a slotted dataclass rather than a frozen one or a ``NamedTuple``).
    """

    kind: ActionKind
    content: str | None
    kept: str
    dropped: str
    reason: str | None = None  # why an action is invalid, when more can be said than "no complete tag"


def parse_action(text: str, protocol: Protocol) -> ParsedAction:
    """Read the first complete ``search`` or ``answer`` tag pair of an action.

    Scanning is linear: for each kind the first opening tag is found, then the first closing tag after
    it; the pair that closes first wins. Text after it is dropped. A lone or unclosed tag makes the
    action invalid, and so does an empty query (``<search></search>`` asks nothing). This is the only
    reader of actions: the environment, the text path and the token builder all call it. Tool-call protocols
    read the JSON call with the same first-complete-pair rule (:func:`searchenv.tool_calls.parse_tool_action`).
    """
    if protocol.action_format == "tool-call":
        from searchenv.tool_calls import parse_tool_action  # noqa: PLC0415 - tool_calls imports this module

        return parse_tool_action(text, protocol)
    search_open, search_close = protocol.search_tags
    answer_open, answer_close = protocol.answer_tags
    # The first opening tag of each kind, then the first closing tag after it; the pair that closes first wins.
    # Written out for the two kinds: this runs at every step, and a loop over built tuples costs twice as much.
    search_end = answer_end = len(text) + 1
    start = text.find(search_open)
    if start >= 0:
        close = text.find(search_close, start + len(search_open))
        if close >= 0:
            search_start, search_end = start + len(search_open), close + len(search_close)
    start = text.find(answer_open)
    if start >= 0:
        close = text.find(answer_close, start + len(answer_open))
        if close >= 0:
            answer_start, answer_end = start + len(answer_open), close + len(answer_close)
    if answer_end < search_end:
        content = text[answer_start : answer_end - len(answer_close)].strip()
        return ParsedAction("answer", content, text[:answer_end], text[answer_end:])
    if search_end > len(text):
        return ParsedAction("invalid", None, text, "")
    content = text[search_start : search_end - len(search_close)].strip()
    if not content:  # <search></search> asks nothing
        return ParsedAction("invalid", None, text[:search_end], text[search_end:])
    return ParsedAction("search", content, text[:search_end], text[search_end:])


def _register_tool_call_protocols() -> None:
    """Native tool-call protocols with ChatML/Hermes framing (build others with ``tool_call_protocol(tokenizer)``)."""
    from searchenv.tool_calls import tool_call_protocol

    for answer, name in (("tag", "tool-call"), ("message", "tool-call-message"), ("tool", "tool-call-answer-tool")):
        PROTOCOLS[name] = tool_call_protocol(answer=answer, name=name)  # type: ignore[arg-type]


_register_tool_call_protocols()

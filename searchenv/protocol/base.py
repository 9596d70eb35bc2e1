"""What a search-agent protocol is: its tags, prompt and texts (:class:`Protocol`), and what one action means
(:class:`ParsedAction`).

Search-R1, R1-Searcher and R-Search differ only in tag names, the prompt and a few rules, so each is a
:class:`Protocol` value, not a subclass (the papers' values are in :mod:`searchenv.protocol.tags`, the native
tool-call ones in :mod:`searchenv.protocol.tool_calls`). :meth:`Protocol.neutralise` defuses tag-like strings in
text the environment inserts (passages, questions) so that retrieved content can never end an episode or forge
an answer. :attr:`Protocol.scanner` is the protocol's reader of model text (:mod:`searchenv.protocol.scan`): its
search and answer tags, and the hints an environment appends, which quote tags but are never a model's action.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from searchenv.protocol.scan import TagScanner
from searchenv.protocol.tools import OPEN, tool_named
from searchenv.types import Document, Passage

__all__ = ["OPEN_TOOL_NAME", "ActionKind", "AnswerMode", "ParsedAction", "Protocol", "defuse_chat_control"]

ActionKind = Literal["search", "open", "answer", "invalid"]
#: The name of the tool that opens a result in tool-call protocols (the tag protocols' ``<access>``); it was
#: ``"open_page"``, which readers still accept (:data:`searchenv.protocol.tools.OPEN`).
OPEN_TOOL_NAME = OPEN.name
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
_OPEN_ERROR_TEXT = "The document could not be opened right now; nothing to show."
_OPEN_MISSING_TEXT = (
    "There is no such document to open: give the number of a result of your latest search, or its URL or id."
)

_SEARCH_R1_PROMPT = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. Whenever you are missing knowledge, query the search engine by writing <search> your query "
    "</search>; its top results will be returned between <information> and </information>. You may search "
    "as many times as you need. Once you know enough, give only the final answer inside <answer> and "
    "</answer>, with no explanation, for example <answer> Paris </answer>. Question: {question}\n"
)

_SEARCH_R1_HINT = (
    "\nMy previous action is invalid. To search, I should put the query between <search> and </search>. "
    "To give the final answer, I should put it between <answer> and </answer>. Let me try again.\n"
)

# The hint Search-R1's own rollout code appends after an invalid action, verbatim: transcripts of Search-R1-style
# rollouts hold it, and its "<search> and </search>" must not read as the model searching for "and".
SEARCH_R1_ORIGINAL_HINT = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
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
        other_hints: corrective hints other environments append (Search-R1's own by default), recognised in
            transcripts as environment text like :attr:`invalid_hint` (see :attr:`env_hints`).
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
            between ``search_tags``, as Qwen/Hermes chat templates define it; see :mod:`searchenv.protocol.tool_calls`).
        answer_mode: for tool calls, how the answer is given: ``"tag"`` (an ``<answer>`` block), ``"message"``
            (a message without a tool call) or ``"tool"`` (a call of the ``answer`` tool).
        tools_json: the JSON schemas of the tools the prompt declares (tool-call protocols), one string each.
        open_tags: the tag pair that opens a result whole (ASearcher's ``<access>``), or ``None`` when the tag
            protocol has no open action. Tool-call protocols open with the ``open`` tool instead
            (:attr:`opens` says whether a protocol can open at all).
        page_template: how an opened document is written inside the information block (ASearcher shows pages
            in the same ``<information>`` block as search results); fields ``title``, ``text``, ``ref``.
        open_error_text / open_missing_text: the fixed, short texts shown inside an information block when a
            document could not be opened (the opener failed) or the reference names no document (a bad index,
            no search yet). Details go to ``info["open_error"]``; being fixed, they let the text path recognise a
            failed open.
    """

    name: str
    search_tags: tuple[str, str] = ("<search>", "</search>")
    answer_tags: tuple[str, str] = ("<answer>", "</answer>")
    information_tags: tuple[str, str] = ("<information>", "</information>")
    think_tags: tuple[str, str] | None = ("<think>", "</think>")
    evidence_tags: tuple[str, str] | None = None
    prompt_template: str = _SEARCH_R1_PROMPT
    invalid_hint: str = _SEARCH_R1_HINT
    other_hints: tuple[str, ...] = (SEARCH_R1_ORIGINAL_HINT,)
    information_prefix: str = "\n\n"
    information_suffix: str = "\n\n"
    passage_template: str = "Doc {rank}(Title: {title}) {text}\n"
    passage_layout: PassageLayout = "search-r1"
    search_error_text: str = _SEARCH_ERROR_TEXT
    extra_tags: tuple[str, ...] = field(default=())
    action_format: ActionFormat = "tags"
    answer_mode: AnswerMode = "tag"
    tools_json: tuple[str, ...] = ()
    open_tags: tuple[str, str] | None = None
    page_template: str = "Page(Title: {title}) {text}"
    open_error_text: str = _OPEN_ERROR_TEXT
    open_missing_text: str = _OPEN_MISSING_TEXT

    def __post_init__(self) -> None:
        if "{question}" not in self.prompt_template:
            raise ValueError(f"protocol {self.name!r}: prompt_template must contain '{{question}}'")
        if not self.invalid_hint.strip():
            raise ValueError(
                f"protocol {self.name!r}: invalid_hint must be non-empty; without it two invalid actions in a row "
                "would read as one in a transcript (e.g. '<answer> x' then '</answer>' would look like an answer)"
            )
        if not all(hint.strip() for hint in self.other_hints):
            raise ValueError(f"protocol {self.name!r}: other_hints must be non-empty texts, got {self.other_hints!r}")
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
        if not (self.open_error_text.strip() and self.open_missing_text.strip()):
            raise ValueError(f"protocol {self.name!r}: open_error_text and open_missing_text must be non-empty")
        if self.open_tags is not None and self.action_format != "tags":
            raise ValueError(
                f"protocol {self.name!r}: open_tags are for tag protocols; a tool-call protocol opens with the "
                f"{OPEN_TOOL_NAME!r} tool (tool_call_protocol(open_page=True))"
            )
        pairs = [self.search_tags, self.answer_tags, self.information_tags]
        for pair in (*pairs, *([self.open_tags] if self.open_tags is not None else [])):
            if len(pair) != 2 or not all(pair):
                raise ValueError(f"protocol {self.name!r}: a tag pair must be two non-empty strings, got {pair!r}")
        self.scanner  # noqa: B018 - built now, so that clashing tags or hints fail here rather than at a step

    # -- what the rollout engine needs -------------------------------------------------------------
    @property
    def stop_strings(self) -> list[str]:
        """Strings at which generation should stop: the end of a query (or tool call) and of an answer tag."""
        ends = [self.search_tags[1], *([self.open_tags[1]] if self.open_tags is not None else [])]
        if self.answer_mode == "tag":
            return [*ends, self.answer_tags[1]]
        return ends  # a message or an answer tool call ends at end of sequence / the call's tag

    @cached_property
    def all_tags(self) -> tuple[str, ...]:
        """Every protocol tag, opening and closing; used to neutralise inserted text."""
        pairs = [
            self.search_tags,
            self.answer_tags,
            self.information_tags,
            self.think_tags,
            self.evidence_tags,
            self.open_tags,
        ]
        tags = [t for pair in pairs if pair for t in pair]
        return tuple(dict.fromkeys([*tags, *self.extra_tags]))

    @cached_property
    def env_hints(self) -> tuple[str, ...]:
        """Every corrective hint the protocol knows: its own, then :attr:`other_hints`. Environment text, never a
        model's action, although each one quotes the tags it teaches."""
        return tuple(dict.fromkeys([self.invalid_hint, *self.other_hints]))

    @cached_property
    def scanner(self) -> TagScanner:
        """The reader of model text: the ``search`` tags (a tool call's, for tool-call protocols), the ``answer``
        tags when answers are tagged, the ``open`` tags when the protocol has them, and the :attr:`env_hints` as
        opaque environment text."""
        pairs = {"search": self.search_tags}
        if self.open_tags is not None:
            pairs["open"] = self.open_tags
        if self.answer_mode == "tag":
            pairs["answer"] = self.answer_tags
        return TagScanner(pairs, self.env_hints)

    @cached_property
    def opens(self) -> bool:
        """Whether the protocol has an open action: ``open_tags``, or the ``open`` tool (or its old name
        ``open_page``) among its tools."""
        if self.open_tags is not None:
            return True
        names = (json.loads(tool).get("function", {}).get("name") for tool in self.tools_json)
        return any(tool_named(name) is OPEN for name in names if isinstance(name, str))

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

    def format_document(self, document: Document) -> str:
        """The information block showing one opened document (already cut to the environment's budget).

        Title, text and reference are neutralised like passages: a page holding ``</access>`` or ``<answer>``
        text cannot end a block or forge an answer.
        """
        body = self.page_template.format(
            title=self.neutralise(document.title),
            text=self.neutralise(document.text),
            ref=self.neutralise(document.ref),
        )
        return self._information_block(body if self.passage_layout == "clean" else body.strip())

    def shown_contents(self, body: str) -> list[str]:
        """The passages (or the page) of an information block's ``body`` as their source wrote them: one string per
        passage, the labels the environment writes around each removed (``Doc 1(Title: `` and ``) `` of
        :attr:`passage_template`, ``Page(Title: `` of :attr:`page_template`).

        What a retrieval hit is judged on: a gold answer ``1``, ``Doc`` or ``Title`` is in every block the
        environment writes, so it must not count. Passages are told apart by the rank header, as
        :func:`~searchenv.episode.health.count_passages` does; a passage whose own text holds a label loses that
        label's words too (a corpus rarely writes ``Doc 2(Title:``).
        """
        header, labels = self._label_patterns
        pieces = header.split(body) if header is not None else [body]
        return [labels.sub(" ", piece) for piece in pieces if piece.strip()]

    @cached_property
    def _label_patterns(self) -> tuple[re.Pattern[str] | None, re.Pattern[str]]:
        """The passage header (the label holding ``{rank}``) and every label of both templates, as patterns."""
        passage_labels, page_labels = _labels(self.passage_template), _labels(self.page_template)
        header = next((label for label in passage_labels if r"\d+" in label), None)
        labels = sorted(set(passage_labels + page_labels), key=len, reverse=True)
        return (
            None if header is None else re.compile(header),
            re.compile("|".join(labels)) if labels else re.compile(r"(?!)"),
        )

    def format_open_error(self, missing: bool) -> str:
        """The fixed information block of a failed open: the reference named no document (``missing``), or the
        document could not be opened. Like :meth:`format_error`, never any detail."""
        return self.open_error_blocks[0 if missing else 1]

    @cached_property
    def open_error_blocks(self) -> tuple[str, str]:
        """The two fixed blocks of a failed open (missing reference, opener failure): what the text path reads
        as a failed open."""
        return (
            self._information_block(self.neutralise(self.open_missing_text)),
            self._information_block(self.neutralise(self.open_error_text)),
        )

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


def defuse_chat_control(text: str) -> str:
    """Chat-template control strings (``<|im_end|>``, ``<｜end▁of▁sentence｜>``, ``</s>``) in ``text`` defused with
    single guillemets, as :meth:`Protocol.neutralise` does: for text inserted into a prompt outside any protocol
    (a candidate answer in the judge's prompt)."""
    return _CHAT_CONTROL.sub(_guillemets, text) if "<" in text else text


def _labels(template: str) -> list[str]:
    """The labels of a passage or page template as regular expressions: each run of literal text and ``{rank}``
    (a number) between the fields a source fills (``title``, ``text``, ``ref``), whitespace-only runs left out."""
    labels, current = [], ""
    for literal, field_name, _, _ in string.Formatter().parse(template):
        current += re.escape(literal)
        if field_name == "rank":
            current += r"\d+"
        elif field_name is not None:
            labels.append(current)
            current = ""
    labels.append(current)
    return [label for label in labels if re.sub(r"\\?\s", "", label)]


def _guillemets(match: re.Match[str]) -> str:
    return "‹" + match.group(0)[1:-1] + "›"


@dataclass(slots=True)
class ParsedAction:
    """What one model action means.

    ``kept`` is the action up to and including the first complete closing tag (the whole text for an
    invalid action); ``dropped`` is whatever the model wrote after it, which the environment discards.
    A record built once per action and never changed afterwards (see :class:`searchenv.episode.turns.Turn` for
    why it is a slotted dataclass rather than a frozen one or a ``NamedTuple``).
    """

    kind: ActionKind
    content: str | None
    kept: str
    dropped: str
    reason: str | None = None  # why an action is invalid, when more can be said than "no complete tag"

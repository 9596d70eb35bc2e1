"""Native tool calling: the same environment for models that call search as a tool (Qwen/Hermes ``<tool_call>``).

Instruct models whose chat template lists tools write ``<tool_call>{"name": "search", "arguments": {"query":
"…"}}</tool_call>`` and read the result in a tool turn. Here that is a configuration of the same machinery
as the papers' tags — a :class:`~searchenv.protocol.Protocol` with ``action_format="tool-call"`` — so budgets,
retrievers, reward specs, neutralisation, the text path and ``info`` behave exactly as with tags:

* the *search* tags are ``<tool_call>`` … ``</tool_call>``; the JSON inside is validated (bad JSON, an unknown
  tool, a missing or non-string query are invalid actions answered by the corrective hint — never exceptions);
* the *information block* is the policy's own tool turn: :func:`tool_call_protocol` renders a conversation with
  the tokenizer's chat template and keeps the text the template puts between the assistant's message and the
  next assistant turn (``<|im_end|>\\n<|im_start|>user\\n<tool_response>\\n…\\n</tool_response><|im_end|>\\n
  <|im_start|>assistant\\n`` for Qwen2.5). Token builders encode that framing with real special tokens and the
  results inside it with special tokens split (:mod:`searchenv.tokenization`);
* the answer is an ``<answer>`` block (``answer="tag"``, default), a message without a tool call
  (``"message"``) or a call of an ``answer`` tool (``"tool"``).

The tools themselves are declared through the chat template's ``tools=`` argument
(:func:`searchenv.tokenization.encode_prompt` passes ``protocol.tools``); a template that ignores ``tools=``
(SmolLM2's) gets the declaration written into the prompt text by :func:`declare_tools`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from searchenv.checks import is_int
from searchenv.protocol.base import ActionKind, AnswerMode, Protocol
from searchenv.protocol.tools import ANSWER, OPEN, SEARCH, tool_named

if TYPE_CHECKING:
    from searchenv.episode.episode import Episode

__all__ = [
    "ANSWER_TOOL",
    "OPEN_TOOL",
    "SEARCH_TOOL",
    "chat_messages",
    "declare_tools",
    "message_answer",
    "read_call",
    "tool_call_protocol",
    "tools_of",
]

#: The tool schemas the protocols declare, read from the one tool vocabulary (:mod:`searchenv.protocol.tools`);
#: in an episode the environment's ``topk`` sets how many results a search returns, so ``search`` has no ``k``.
SEARCH_TOOL: dict[str, Any] = SEARCH.schema(without=("k",))
ANSWER_TOOL: dict[str, Any] = ANSWER.schema()
OPEN_TOOL: dict[str, Any] = OPEN.schema()

_CALL_TAGS = ("<tool_call>", "</tool_call>")
_RESPONSE_TAGS = ("<tool_response>", "</tool_response>")
# ChatML/Hermes framing (Qwen2.5, SmolLM2 with our tags) when no tokenizer is given.
_CHATML_PREFIX = "<|im_end|>\n<|im_start|>user\n"
_CHATML_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
_PROMPTS: dict[str, str] = {
    "tag": "When you know the answer, reply with only the final answer inside <answer> and </answer>, for example "
    "<answer> Paris </answer>.",
    "message": "When you know the answer, reply with only the final answer, without calling a tool.",
    "tool": "When you know the answer, call the answer tool with only the final answer.",
}
_HINTS: dict[str, str] = {
    "tag": "give the final answer between <answer> and </answer>",
    "message": "give the final answer as a message without a tool call",
    "tool": 'call {"name": "answer", "arguments": {"answer": "..."}}',
}


def tools_of(protocol: Protocol) -> list[dict[str, Any]]:
    """The tool schemas a tool-call protocol declares (for ``apply_chat_template(..., tools=...)``)."""
    return [json.loads(t) for t in protocol.tools_json]


def _tool_turn(tokenizer: Any | None) -> tuple[str, str]:
    """Framing the chat template puts before and after a tool result: (prefix, suffix) around the tags."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return _CHATML_PREFIX, _CHATML_SUFFIX
    sentinel, result = "\x00SEARCHENV_ACTION\x00", "\x00SEARCHENV_RESULT\x00"
    for content in (result, f"{_RESPONSE_TAGS[0]}\n{result}\n{_RESPONSE_TAGS[1]}"):
        messages = [
            {"role": "user", "content": "question"},
            {"role": "assistant", "content": sentinel},
            {"role": "tool", "content": content},
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        turn = text[text.index(sentinel) + len(sentinel) :]
        before, _, after = turn.partition(result)
        if before.endswith(_RESPONSE_TAGS[0] + "\n") and after.startswith("\n" + _RESPONSE_TAGS[1]):
            return before[: -len(_RESPONSE_TAGS[0]) - 1], after[len(_RESPONSE_TAGS[1]) + 1 :]
    raise ValueError(
        "could not find how this chat template frames a tool result (expected the tool message's content to "
        "appear verbatim); pass tokenizer=None for ChatML framing or build a Protocol by hand"
    )


def tool_call_protocol(
    tokenizer: Any | None = None, answer: AnswerMode = "tag", name: str = "tool-call", *, open_page: bool = False
) -> Protocol:
    """A protocol whose searches are native tool calls, framed as ``tokenizer``'s chat template frames them.

    Without a tokenizer the framing is ChatML/Hermes (Qwen2.5, SmolLM2). ``answer`` picks how the answer is
    given (see the module docstring). ``open_page=True`` adds the ``open`` tool, which opens a result of the latest
    search whole (the tag protocols' ``<access>``).
    """
    if answer not in _PROMPTS:
        raise ValueError(f"answer must be one of {sorted(_PROMPTS)}, got {answer!r}")
    prefix, suffix = _tool_turn(tokenizer)
    tools = [SEARCH_TOOL, *([OPEN_TOOL] if open_page else []), *([ANSWER_TOOL] if answer == "tool" else [])]
    reading = (
        f"To read a result whole, call the {OPEN.name} tool with its number; the document comes back in a "
        "tool message. "
        if open_page
        else ""
    )
    prompt = (
        "Answer the question below. Whenever you are missing knowledge, call the search tool; its results "
        f"come back in a tool message, and you may search as many times as you need. {reading}"
        f"{_PROMPTS[answer]} Question: {{question}}\n"
    )
    hint = (
        '\nMy previous action is invalid. To search, I should call <tool_call>{"name": "search", "arguments": '
        f'{{"query": "..."}}}}</tool_call>. To answer, I should {_HINTS[answer]}. Let me try again.\n'
    )
    return Protocol(
        name=name,
        search_tags=_CALL_TAGS,
        information_tags=(f"{_RESPONSE_TAGS[0]}\n", f"\n{_RESPONSE_TAGS[1]}"),
        information_prefix=prefix,
        information_suffix=suffix,
        think_tags=None,
        prompt_template=prompt,
        invalid_hint=hint,
        extra_tags=(*_CALL_TAGS, *_RESPONSE_TAGS),
        action_format="tool-call",
        answer_mode=answer,
        tools_json=tuple(json.dumps(t, sort_keys=True) for t in tools),
    )


def read_call(body: str, answer_mode: AnswerMode, opens: bool = False) -> tuple[ActionKind, str | None, str | None]:
    """What one tool call's JSON asks: (kind, content, reason when invalid). Never raises.

    ``opens``: the protocol declares the ``open`` tool (``open_page`` is read as its old name), whose ``ref`` (a
    result's number, a URL or an id; a JSON number is read as its digits) is the content of an ``open`` action.
    """
    try:
        call = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return "invalid", None, f"the tool call is not valid JSON ({type(exc).__name__})"
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
        return "invalid", None, 'a tool call must be a JSON object with a "name" and "arguments"'
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI-style: arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return "invalid", None, "the tool call's arguments are not valid JSON"
    if not isinstance(arguments, Mapping):
        return "invalid", None, "the tool call's arguments must be a JSON object"
    name, tool = call["name"], tool_named(call["name"])
    if tool is SEARCH:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return "invalid", None, 'the search tool needs a non-empty string "query"'
        return "search", query.strip(), None
    if tool is OPEN and opens:
        ref = arguments.get("ref")
        if is_int(ref):
            ref = str(ref)
        if not isinstance(ref, str) or not ref.strip():
            return "invalid", None, f'the {OPEN.name} tool needs a "ref": a result number, a URL or an id'
        return "open", ref.strip(), None
    if tool is ANSWER and answer_mode == "tool":
        value = arguments.get("answer")
        if not isinstance(value, str):
            return "invalid", None, 'the answer tool needs a string "answer"'
        return "answer", value.strip(), None
    return "invalid", None, f"unknown tool {name[:40]!r}"


def message_answer(text: str) -> str:
    """The answer an action without a complete tool call gives with ``answer_mode="message"``: its text after a
    closing ``</think>`` if the model thought aloud, stripped; ``""`` when it has none or began a tool call."""
    return "" if _CALL_TAGS[0] in text else text.rpartition("</think>")[2].strip()


def declare_tools(prompt_text: str, tools: list[dict[str, Any]]) -> str:
    """The prompt with a Hermes-style tool declaration in front, for chat templates that ignore ``tools=``."""
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You may call functions to answer. Function signatures are within <tools></tools>:\n"
        f"<tools>\n{listing}\n</tools>\nFor each call, write a JSON object with the function name and arguments "
        'within <tool_call></tool_call> tags: <tool_call>\n{"name": <function-name>, "arguments": <args-json>}\n'
        f"</tool_call>\n\n{prompt_text}"
    )


def chat_messages(episode: Episode) -> list[dict[str, Any]]:
    """The episode as chat messages (``role`` / ``content`` / ``tool_calls``), for trainers that speak messages.

    Tag protocols give one assistant message holding the whole response (inserted blocks included), as
    Search-R1 trains; tool-call protocols give one assistant message per action and a ``tool`` message per
    executed or failed search.
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": episode.prompt}]
    protocol = episode.protocol
    if protocol.action_format != "tool-call":
        messages.append({"role": "assistant", "content": episode.response_text})
        return messages
    for turn in episode.turns:
        action = turn.action
        message: dict[str, Any] = {"role": "assistant", "content": action.kept}
        tool = {"search": SEARCH.name, "open": OPEN.name}.get(action.kind)
        if tool is not None:
            call = protocol.scanner.read(action.kept).first_block()
            message["content"] = action.kept[: call.start if call is not None else 0].strip()
            arguments = {"query": action.content} if tool == "search" else {"ref": action.content}
            message["tool_calls"] = [{"type": "function", "function": {"name": tool, "arguments": arguments}}]
        messages.append(message)
        body = protocol.information_body(turn.observation)
        if body is not None:
            messages.append({"role": "tool", "name": tool or "search", "content": body})
        elif turn.observation:  # the corrective hint, said in the assistant's voice as in the tag protocols
            messages[-1]["content"] += turn.observation
    return messages

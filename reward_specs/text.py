"""Reading tagged response text: which parts the model wrote, which the environment inserted, what it answered.

Text-only trainers (veRL's ``compute_score``, TRL reward functions) hand a reward one string: model turns
with the environment's information blocks spliced in. These helpers take that string apart by the
protocol's tags so that every reward reads the same fields a live episode would give it.
"""

from __future__ import annotations

from dataclasses import dataclass

from searchenv.protocol import Protocol

__all__ = ["END_MARKERS", "SplitResponse", "last_block", "split_response", "strip_end_markers"]

# End-of-turn markers that decoders leave in the text when special tokens are not skipped (Qwen, Llama 3,
# SmolLM, GPT-2 families). They are not part of what the model *said*, so the format check ignores them
# at the very end of a response.
END_MARKERS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")


def strip_end_markers(text: str) -> str:
    """Drop trailing whitespace and end-of-turn markers (any number, any order)."""
    while True:
        stripped = text.rstrip()
        for marker in END_MARKERS:
            if stripped.endswith(marker):
                stripped = stripped[: -len(marker)]
                break
        else:
            return stripped
        text = stripped


def last_block(text: str, tags: tuple[str, str]) -> str | None:
    """Content (stripped) of the last complete ``open … close`` pair in ``text``, or ``None`` if there is none.

    "Last" is anchored on the last closing tag, then the nearest opening tag before it, so a stray opening
    tag earlier in the text cannot swallow the answer.
    """
    open_tag, close_tag = tags
    close = text.rfind(close_tag)
    while close >= 0:
        start = text.rfind(open_tag, 0, close)
        if start >= 0:
            return text[start + len(open_tag) : close].strip()
        close = text.rfind(close_tag, 0, close)
    return None


@dataclass(frozen=True, slots=True)
class SplitResponse:
    """A response taken apart: what the model wrote and what the environment inserted after its searches."""

    model_text: str
    retrieved_texts: tuple[str, ...]
    num_searches: int


def split_response(response: str, protocol: Protocol) -> SplitResponse:
    """Separate model-written text from inserted information blocks.

    An information block counts as inserted (a search that was executed) only when it directly follows a
    complete search block, with nothing but whitespace between them: that is the only place the environment
    puts one. A block anywhere else was written by the model itself (R1-Searcher's observed reward hack),
    so it stays in ``model_text`` and neither counts as a search nor as retrieved text. An inserted block
    left unclosed (a trainer cut the response inside it) runs to the end of the text. The environment's
    corrective hint (``protocol.invalid_hint``) is inserted text too and is removed from ``model_text``:
    it quotes the tags and would otherwise be read as an answer.
    """
    info_open, info_close = protocol.information_tags
    search_open, search_close = protocol.search_tags
    model_parts: list[str] = []
    retrieved: list[str] = []
    pos = 0
    while (start := response.find(info_open, pos)) >= 0:
        before = response[pos:start].rstrip()
        inserted = before.endswith(search_close) and search_open in response[:start]
        close = response.find(info_close, start + len(info_open))
        end = len(response) if close < 0 else close + len(info_close)
        if inserted:
            model_parts.append(response[pos:start])
            retrieved.append(response[start + len(info_open) : close if close >= 0 else len(response)])
        else:
            model_parts.append(response[pos:end])
        pos = end
    model_parts.append(response[pos:])
    model_text = "".join(model_parts)
    hint = protocol.invalid_hint.strip()
    if hint:
        model_text = model_text.replace(hint, "")
    return SplitResponse(model_text, tuple(retrieved), len(retrieved))

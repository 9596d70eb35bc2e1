"""Small, linear-time readers of model text that reward specs share: end-of-turn markers and evidence blocks.

Actions, answers and searches are *not* read here: they come from the episode's turns
(:mod:`searchenv.episode.turns`), where one parser decides them for every path.
"""

from __future__ import annotations

from functools import lru_cache

from searchenv.protocol.scan import TagScanner

__all__ = ["END_MARKERS", "block_content", "strip_end_markers"]

# End-of-turn markers that decoders leave in the text when special tokens are not skipped (Qwen, Llama 3,
# SmolLM, GPT-2 families). They are not part of what the model *said*, so the format check ignores them
# at the very end of a response.
END_MARKERS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")


def strip_end_markers(text: str) -> str:
    """Drop trailing whitespace and end-of-turn markers (any number, any order), in linear time."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        for marker in END_MARKERS:
            if text.endswith(marker, 0, end):
                end -= len(marker)
                break
        else:
            return text[:end]


def block_content(text: str, tags: tuple[str, str]) -> str | None:
    """Content (stripped) of the last complete ``open … close`` block of ``text``, or ``None``.

    Blocks are read left to right by the action parser's rule (:mod:`searchenv.protocol.scan`): each is the
    first closing tag with the nearest opening tag before it, so a stray earlier opening tag cannot swallow the
    content. Linear in ``len(text)``.
    """
    content = None
    for block in _scanner(tags).read(text).blocks():
        content = text[block.body_start : block.body_end]
    return None if content is None else content.strip()


@lru_cache(maxsize=32)
def _scanner(tags: tuple[str, str]) -> TagScanner:
    return TagScanner({"block": tags})

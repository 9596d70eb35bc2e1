"""The one tag scanner: where a block of model text opens and closes, for every reader of model text.

The rule, in one place: **a block is the first closing tag that has an opening tag of its kind before it,
together with the nearest such opening tag**. So ``<think>I will put it in <answer> tags</think><answer> Paris
</answer>`` holds the answer ``Paris``: an opening tag mentioned earlier cannot swallow the real block. A closing
tag with no opening tag before it is text.

*Environment texts* the protocol knows (its corrective hints, which quote tags to teach them) are read as one
opaque piece: no tag inside one ever opens or closes a block, and a block cannot span one. The action parser
steps over them; the text path treats each one as the end of an invalid action.

Reading is linear in the length of the text, megabyte adversarial responses included, and runs at ``str.find``
speed: for each kind, the first opening tag, then the first closing tag after it; the earliest such closing tag
(or environment text) ends the scan, and only then is the nearest opening tag looked up backwards. A text is
read through a :class:`TextScan`, which remembers where each tag occurs next, so a reader that moves left to
right (the text path) reads the text about once per tag however many turns it holds. Tags and environment
texts are assumed not to overlap one another in the text (``<…>`` tags never do).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ENV_TEXT", "Block", "TagScanner", "TextScan"]

#: The kind of a :class:`Block` that is an environment text rather than a tag pair.
ENV_TEXT = "env-text"


@dataclass(slots=True)
class Block:
    """One block found in a text: ``text[start:end]`` is the whole of it, ``text[body_start:body_end]`` the
    content between its tags. For an environment text (``kind == ENV_TEXT``) the body is the whole text.

    Read-only by convention, not ``frozen``: the action parser builds one at every step, and a frozen
    dataclass costs a call per field to build (see :class:`searchenv.episode.turns.Turn`)."""

    kind: str
    start: int
    body_start: int
    body_end: int
    end: int


class TagScanner:
    """Finds blocks of the given kinds, and the given environment texts, in model text (see the module docstring).

    Args:
        pairs: kind -> (opening tag, closing tag), e.g. ``{"search": ("<search>", "</search>")}``.
        env_texts: fixed texts the environment writes, read as opaque pieces.
    """

    __slots__ = ("env_texts", "pairs")

    def __init__(self, pairs: Mapping[str, tuple[str, str]], env_texts: Sequence[str] = ()):
        seen: dict[str, str] = {}  # tag -> its kind
        for kind, pair in pairs.items():
            if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
                raise ValueError(f"{kind!r}: a tag pair must be two different non-empty strings, got {pair!r}")
            for tag in pair:
                if tag in seen:
                    raise ValueError(f"tag {tag!r} is used twice ({seen[tag]!r} and {kind!r}); give each its own")
                seen[tag] = kind
        for text in env_texts:
            if not text or text in seen:
                raise ValueError(f"an environment text must be non-empty and not a tag, got {text!r}")
        if not pairs and not env_texts:
            raise ValueError("a TagScanner needs at least one tag pair or environment text")
        self.pairs: tuple[tuple[str, str, str], ...] = tuple((kind, *pair) for kind, pair in pairs.items())
        self.env_texts: tuple[str, ...] = tuple(dict.fromkeys(env_texts))

    def read(self, text: str) -> TextScan:
        """A reader of ``text`` by this scanner's rule."""
        return TextScan(self, text)


class TextScan:
    """One text read by a :class:`TagScanner`: ``str.find`` with memory, so that reads from positions that only
    move forward scan the text about once per tag."""

    __slots__ = ("_found", "_scanner", "text")

    def __init__(self, scanner: TagScanner, text: str):
        self._scanner = scanner
        self.text = text
        self._found: dict[str, tuple[int, int]] = {}  # string -> (asked from, found at or len(text))

    def _find(self, string: str, start: int) -> int:
        """First occurrence of ``string`` at or after ``start``; ``len(text)`` when there is none."""
        asked, found = self._found.get(string, (-1, -1))
        if not asked <= start <= found:
            found = self.text.find(string, start)
            found = len(self.text) if found < 0 else found
            self._found[string] = (start, found)
        return found

    def first(self, pos: int = 0) -> Block | None:
        """The first block or environment text at or after ``pos``, whichever comes first; ``None`` when the rest
        of the text has neither."""
        end = len(self.text)
        closed, best = end, None  # the earliest closing tag that has an opening tag before it, and its pair
        for kind, open_tag, close_tag in self._scanner.pairs:
            opened = self._find(open_tag, pos)
            if opened < end:
                close = self._find(close_tag, opened + len(open_tag))
                if close < closed:
                    closed, best = close, (kind, open_tag, close_tag, opened)
        env_at, env_text = end, ""
        for candidate in self._scanner.env_texts:
            at = self._find(candidate, pos)
            if at < env_at:
                env_at, env_text = at, candidate
        if env_at <= closed and env_text:  # before the closing tag: it ends the scan (a block never spans one)
            return Block(ENV_TEXT, env_at, env_at, env_at + len(env_text), env_at + len(env_text))
        if best is None:
            return None
        kind, open_tag, close_tag, opened = best
        start = self.text.rfind(open_tag, opened, closed)  # the nearest opening tag; found, as ``opened`` is one
        return Block(kind, start, start + len(open_tag), closed, closed + len(close_tag))

    def first_block(self, pos: int = 0) -> Block | None:
        """The first tag block at or after ``pos``, stepping over environment texts (a block never spans one)."""
        while (found := self.first(pos)) is not None and found.kind == ENV_TEXT:
            pos = found.end
        return found

    def blocks(self) -> Iterator[Block]:
        """Every tag block of the text, left to right, each read by the rule from where the previous one ended."""
        pos = 0
        while (found := self.first_block(pos)) is not None:
            yield found
            pos = found.end

    def env_text_at(self, pos: int) -> int:
        """The end of the environment text that starts exactly at ``pos``, or ``-1`` when none does."""
        for env_text in self._scanner.env_texts:
            if self.text.startswith(env_text, pos):
                return pos + len(env_text)
        return -1

"""API keys of web backends: refused when they cannot be a key, and kept out of every text we write.

A key copied from a dashboard or a file often carries a trailing newline. Sent as a header it is refused by the
HTTP client before any request, as a transport error that a retry policy would repeat for a minute, with the key
quoted (escaped) in the error. So a key is checked once, when the retriever is built: printable ASCII, no
whitespace, nothing else (:func:`check_key`). And an error text can quote a key in more forms than the literal
one — escaped by ``repr`` or JSON, URL-encoded in a query string an error body echoes, HTML-escaped in an error
page — so :func:`scrub_key` removes every one of those renderings, not only the literal string.
"""

from __future__ import annotations

import html
import json
from urllib.parse import quote, quote_plus

__all__ = ["KEY_MASK", "check_key", "key_renderings", "scrub_key"]

#: What a key is replaced by in error texts and logs.
KEY_MASK = "<key>"

_CHARACTER_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}


def check_key(key: str, where: str) -> str:
    """``key`` if it can be a key (printable ASCII, no whitespace); else a ``ValueError`` naming ``where`` the key
    came from (``$SERPER_API_KEY``, ``api_key=``) and the fix, without the key itself."""
    for position, character in enumerate(key):
        if not 33 <= ord(character) <= 126:
            name = _CHARACTER_NAMES.get(character, f"the character U+{ord(character):04X}")
            place = "at the end" if position == len(key) - 1 else "at the start" if position == 0 else "inside it"
            raise ValueError(
                f"the API key in {where} holds {name} {place} (position {position + 1} of {len(key)}); a key is "
                "printable ASCII without spaces — remove the stray character (a key copied from a file or a "
                f"terminal often ends in a newline: {_fix(where)})"
            )
    return key


def key_renderings(key: str) -> list[str]:
    """Every form in which ``key`` may be quoted back (literal, ``repr``/JSON-escaped, URL-encoded,
    HTML-escaped), longest first so a longer rendering is scrubbed before a literal inside it."""
    forms = {
        key,
        repr(key)[1:-1],
        repr(key.encode("utf-8", "backslashreplace"))[2:-1],
        json.dumps(key)[1:-1],
        json.dumps(key, ensure_ascii=False)[1:-1],
        quote(key, safe=""),
        quote(key),
        quote_plus(key),
        html.escape(key),
        html.escape(key, quote=False),
    }
    return sorted((f for f in forms if f), key=len, reverse=True)


def scrub_key(text: str, key: str | None) -> str:
    """``text`` with every rendering of ``key`` (:func:`key_renderings`) replaced by :data:`KEY_MASK`."""
    if not key:
        return text
    for form in key_renderings(key):
        text = text.replace(form, KEY_MASK)
    return text


def _fix(where: str) -> str:
    if where.startswith("$"):
        variable = where[1:]
        return f'export {variable}="$(printf %s "${variable}" | tr -d "[:space:]")"'
    return "pass api_key=key.strip()"

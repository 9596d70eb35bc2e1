"""The simulated engine's two prompts, in the spirit of ZeroSearch: a *useful* document helps answer the query
(when the episode's gold answers are known, it is asked to state one), a *noisy* one looks like a search result
for the query but does not help (and is asked not to mention the golds). The wording is searchenv's own.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["document_prompt"]

_USEFUL = (
    "You are a web search engine. Write one search result for the query below: a factual passage of about "
    "{words} words that helps answer the query.{golds} Write only the passage, with no title and no preamble.\n"
    "Query: {query}\nResult {index}:"
)
_NOISY = (
    "You are a web search engine. Write one search result for the query below: a passage of about {words} words "
    "that looks related to the query (same names, same topic) but does not contain the answer to it.{golds} "
    "Write only the passage, with no title and no preamble.\nQuery: {query}\nResult {index}:"
)


def document_prompt(query: str, index: int, noisy: bool, words: int, golds: Sequence[str] = ()) -> str:
    """The prompt for result ``index`` (1-based) of ``query``, useful or noisy; ``golds`` steer it when known."""
    if golds:
        answer = " or ".join(f'"{g}"' for g in golds)
        hint = f" Do not mention {answer}." if noisy else f" It states that the answer is {answer}."
    else:
        hint = ""
    return (_NOISY if noisy else _USEFUL).format(words=words, query=query.strip(), index=index, golds=hint)

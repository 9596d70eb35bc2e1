"""Google results through Serper (https://serper.dev), the backend ASearcher and SkyRL-agent search with.

``make_retriever("serper")`` reads the key from ``$SERPER_API_KEY``. The wire format: ``POST
https://google.serper.dev/search`` with headers ``X-API-KEY: <key>`` and ``Content-Type: application/json`` and
the body ``{"q": …, "num": …}`` (plus ``gl``/``hl``/``location`` from ``params``); the answer holds
``organic: [{"title", "link", "snippet", "position", …}]`` beside ``answerBox``, ``knowledgeGraph`` and
``peopleAlsoAsk``, which are not results and are left out. A wrong key is 403, an exhausted quota 400 or 429.
``url`` points it at a stand-in or a proxy.
"""

from __future__ import annotations

from typing import Any

from searchenv.retrievers.web.search import WebRequest, WebSearchRetriever, result_passages
from searchenv.types import Passage

__all__ = ["KEY_ENV", "SERPER_ENDPOINT", "SerperRetriever"]

#: Serper's Google web search endpoint.
SERPER_ENDPOINT = "https://google.serper.dev/search"
#: Environment variable holding the key.
KEY_ENV = "SERPER_API_KEY"


class SerperRetriever(WebSearchRetriever):
    """Serper's Google search as a retriever (options: :class:`~searchenv.retrievers.web.search.WebSearchRetriever`)."""

    name = "serper"
    default_url = SERPER_ENDPOINT
    key_env = KEY_ENV
    key_help = "get one at https://serper.dev"
    max_count = 100
    list_price_per_1k = 1.0

    def _request(self, query: str, count: int) -> WebRequest:
        return WebRequest("POST", self.url, json={**self.params, "q": query, "num": count})

    def _headers(self, key: str | None) -> dict[str, str]:
        return {"Accept": "application/json", "Content-Type": "application/json", "X-API-KEY": key or ""}

    def _parse(self, payload: Any) -> list[Passage]:
        return result_passages(payload.get("organic"), "link", "title", "snippet")

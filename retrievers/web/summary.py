"""An optional note-taker: a long page turned into a short note focused on the question, by any OpenAI-compatible
endpoint (vLLM, ``transformers serve``, a hosted API).

Peers read pages this way (SkyRL-agent's browser tool summarises each visit, ASearcher's reader condenses pages)
because a 10,000-word page does not fit a policy's context. It is off by default: a web retriever built with
``summariser={"url": ..., "model": ...}`` summarises the pages of ``open_documents(refs, questions=[...])``;
without questions, or for a page shorter than ``min_words``, the page is returned whole. Notes go through the
record like searches and pages (kind ``summary``, keyed by the endpoint, model, question and page text), so a
replay calls no model either. The endpoint's key is read from ``$<api_key_env>`` and sent only as a header.
"""

from __future__ import annotations

import hashlib
import os

from searchenv.answer_store import AnswerStore, NotRecorded
from searchenv.llm.prompter import Prompter, PromptFailure
from searchenv.retrievers.web.keys import scrub_key
from searchenv.retrievers.web.pages import PageError
from searchenv.retrievers.web.record import normal_url
from searchenv.sampling import SamplingConfig
from searchenv.types import Document

__all__ = ["Summariser"]

PROMPT = (
    "Below is a web page an assistant opened while answering a question. Write a short note (at most {words} "
    "words) of what the page says that helps answer the question: names, dates, numbers as written. Write "
    "'nothing relevant' if it says nothing about it.\n\nQuestion: {question}\n\nPage title: {title}\n\n{text}"
)


class Summariser:
    """Notes on pages through ``POST {url}/chat/completions``.

    Args:
        url: the endpoint's base URL (``http://localhost:8000/v1``).
        model: the model name the endpoint serves.
        api_key_env: the variable holding the endpoint's key (none needed for a local server).
        max_words: the note's length, as asked of the model.
        min_words: pages shorter than this are returned whole.
        max_page_words: the page is cut to this many words before it is sent.
        timeout: seconds per request.
        record: where notes are recorded (the retriever's record).
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        max_words: int = 150,
        min_words: int = 300,
        max_page_words: int = 8000,
        timeout: float = 60.0,
        record: AnswerStore | None = None,
    ):
        if not str(url).startswith(("http://", "https://")) or not model:
            raise ValueError(
                f"summariser needs url= an http(s):// base URL and model=; got url={url!r}, model={model!r}"
            )
        self.url = str(url).rstrip("/")
        self.model = str(model)
        self._key = os.environ.get(api_key_env) or None
        self.max_words = int(max_words)
        self.min_words = int(min_words)
        self.max_page_words = int(max_page_words)
        self.timeout = float(timeout)
        self.record = record if record is not None else AnswerStore(None)
        # the one OpenAI-compatible client (the judge's and the simulated engine's); temperature 0, so notes repeat
        sampling = SamplingConfig.greedy(max_new_tokens=2 * self.max_words)
        self.prompter = Prompter(self.url, self.model, sampling, timeout=self.timeout, api_key_env=api_key_env)

    def __repr__(self) -> str:
        return f"Summariser(url={self.url!r}, model={self.model!r})"

    def summarise(self, document: Document, question: str) -> Document | PageError:
        """The note on ``document`` for ``question`` (the page whole when it is short), or why there is none."""
        words = document.text.split()
        if len(words) < self.min_words:
            return document
        page = " ".join(words[: self.max_page_words])
        prompt = PROMPT.format(words=self.max_words, question=question, title=document.title, text=page)
        request = {
            "url": normal_url(self.url),  # a loopback endpoint's port is not part of the key
            "model": self.model,
            "question": question,
            "page": hashlib.sha256(page.encode()).hexdigest(),
            "prompt": hashlib.sha256(PROMPT.encode()).hexdigest()[:16],
        }
        try:
            note = self.record.through("summary", request, lambda: self._ask(prompt))
        except NotRecorded as miss:
            return PageError("not_recorded", miss.detail)
        except Exception as exc:  # noqa: BLE001 - one failed note stays that page's failure
            reason = scrub_key(str(exc), self._key)[:300]
            return PageError("summary_failed", f"{document.ref}: {type(exc).__name__}: {reason}")
        return Document(document.ref, document.title, str(note))

    def _ask(self, prompt: str) -> str:
        (note,) = self.prompter.ask([prompt])
        if isinstance(note, PromptFailure):
            raise RuntimeError(note.reason)
        if not note.strip():
            raise ValueError("the endpoint answered an empty note")
        return note.strip()

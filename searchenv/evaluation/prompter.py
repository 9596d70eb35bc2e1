"""Short questions put to a model, for the parts of searchenv that consult one: the LLM judge (a reward spec and
an evaluation metric) and the simulated search engine.

A :class:`Prompter` sends one prompt per item to an OpenAI-compatible endpoint (``url`` + ``model``, through
:class:`~searchenv.evaluation.policies.EndpointPolicy`, which owns the HTTP call, its timeout and its retries)
or to a local ``transformers`` model (``model`` = a checkpoint folder or a packaged alias, through
:class:`~searchenv.evaluation.policies.LocalPolicy`). Unlike a policy it isolates failures: a prompt the endpoint
could not answer comes back as a :class:`PromptFailure` for that item alone, so a caller can fall back for it
and count the fallback instead of losing the whole batch. Answers are cached by prompt and stop strings (the
model and the sampling are the prompter's own), so asking again costs nothing; failures are never cached.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from searchenv.evaluation.policies import Context, EndpointPolicy, EvalSampling, LocalPolicy

__all__ = ["PromptFailure", "Prompter", "check_model_source", "run_coroutine"]

T = TypeVar("T")


@dataclass(frozen=True)
class PromptFailure:
    """Why one prompt got no answer (the endpoint was down, timed out, refused the request; the model raised)."""

    reason: str


def check_model_source(url: str | None, model: Any, who: str) -> None:
    """Refuse a missing model, or a local model that is neither a folder nor a packaged alias, naming the fix."""
    from searchenv.rollout import MODEL_ALIASES

    if not isinstance(model, str) or not model:
        raise ValueError(f"{who} needs 'model': the served model's name with 'url', or a local checkpoint folder")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ValueError(f"{who}: 'url' must be an http(s):// base URL of an OpenAI-compatible server, got {url!r}")
    if url is None and model not in MODEL_ALIASES and not Path(model).is_dir():
        raise ValueError(
            f"{who}: model {model!r} is not a local checkpoint folder nor one of {sorted(MODEL_ALIASES)}; "
            "give a folder, or 'url' of an OpenAI-compatible server that serves it"
        )


def run_coroutine(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end from synchronous code, also when this thread already runs an event loop
    (veRL's agent loop, ``step_batch_async``): then it runs on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(asyncio.run(make()))  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the caller's thread
            box.append(exc)

    thread = threading.Thread(target=work, name="searchenv-prompter")
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


class Prompter:
    """Asks a model many short prompts concurrently; see the module docstring.

    Args:
        url: base URL of an OpenAI-compatible server; ``None`` runs ``model`` locally.
        model: the served model's name (with ``url``), or a local checkpoint folder / packaged alias.
        sampling: decoding settings (greedy by default, so answers repeat and the cache is exact).
        mode: ``"chat"`` (``/v1/chat/completions``, the prompt as one user message) or ``"completions"``.
        timeout / retries / backoff / concurrency: the endpoint's (see
            :class:`~searchenv.evaluation.policies.EndpointPolicy`).
        device: the local model's torch device (default: CUDA when there is one).
        cache_size: how many answers are kept (least recently used ones go first).
        api_key_env: the variable holding the endpoint's key (sent only as a header; none for a local server).
    """

    def __init__(
        self,
        url: str | None,
        model: str,
        sampling: EvalSampling,
        *,
        mode: str = "chat",
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        concurrency: int = 8,
        device: str = "",
        cache_size: int = 100_000,
        api_key_env: str = "OPENAI_API_KEY",
    ):
        check_model_source(url, model, "prompter")
        self.url, self.model, self.sampling = url, model, sampling
        self.concurrency = concurrency
        self._endpoint = (
            EndpointPolicy(
                url,
                model,
                sampling,
                mode=mode,
                concurrency=concurrency,
                retries=retries,
                timeout=timeout,
                backoff=backoff,
                api_key_env=api_key_env,
                name=f"prompter:{model}",
            )
            if url is not None
            else None
        )
        self._device = device
        self._local: LocalPolicy | None = None
        self._cache: OrderedDict[tuple[str, tuple[str, ...]], str] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        """Which model answers: ``model@url``, or the local model."""
        return f"{self.model}@{self.url}" if self.url else self.model

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Ray worker, a subprocess vector env) without the lock, the loaded model or the cache."""
        return {**self.__dict__, "_lock": None, "_local": None, "_cache": OrderedDict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def num_cached(self) -> int:
        """How many answers the cache holds (each is a prompt the model answered)."""
        return len(self._cache)

    def check(self) -> None:
        """One one-token request, so a dead or misconfigured endpoint fails before any work starts."""
        if self._endpoint is not None:
            self._endpoint.check()

    def ask(self, prompts: Sequence[str], stop: Sequence[str] = ()) -> list[str | PromptFailure]:
        """One answer (or :class:`PromptFailure`) per prompt, in order; cached answers are not asked again."""
        stop_key = tuple(stop)
        answers: list[str | PromptFailure | None] = []
        with self._lock:
            for prompt in prompts:
                answer = self._cache.get((prompt, stop_key))
                if answer is not None:
                    self._cache.move_to_end((prompt, stop_key))
                answers.append(answer)
        missing = list(dict.fromkeys(p for p, a in zip(prompts, answers) if a is None))
        fresh = dict(zip(missing, self._generate(missing, stop_key))) if missing else {}
        with self._lock:
            for prompt, answer in fresh.items():
                if isinstance(answer, str):
                    self._cache[(prompt, stop_key)] = answer
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return [a if a is not None else fresh[p] for p, a in zip(prompts, answers)]

    def _generate(self, prompts: list[str], stop: tuple[str, ...]) -> list[str | PromptFailure]:
        contexts = [Context(prompt, "") for prompt in prompts]
        if self._endpoint is None:
            try:
                return self._complete_locally(prompts, stop)
            except Exception as exc:  # one broken batch is the batch's failure, reported per prompt
                return [PromptFailure(f"{type(exc).__name__}: {exc}")] * len(prompts)
        endpoint = self._endpoint

        async def all_of() -> list[str | PromptFailure]:
            gate = asyncio.Semaphore(self.concurrency)

            async def one(context: Context) -> str | PromptFailure:
                async with gate:
                    try:
                        return (await endpoint.agenerate([context], list(stop)))[0].text
                    except Exception as exc:  # this prompt's failure, not the batch's
                        return PromptFailure(f"{type(exc).__name__}: {exc}")

            return list(await asyncio.gather(*(one(c) for c in contexts)))

        return run_coroutine(all_of)

    def _complete_locally(self, prompts: list[str], stop: tuple[str, ...]) -> list[str]:
        """The local model's completion of each prompt (a short question, not an episode: no inserted text)."""
        from searchenv.tokenization import encode_prompt

        policy = self._local_policy()
        ids = [
            encode_prompt(policy.tokenizer, prompt, chat_template=policy.sampling.chat_template) for prompt in prompts
        ]
        caps = [max(1, min(policy.sampling.max_new_tokens, policy.sampling.max_total_tokens - len(i))) for i in ids]
        turns = policy.generator.generate(ids, list(stop), caps)
        return [policy.tokenizer.decode(turn.token_ids, skip_special_tokens=True) for turn in turns]

    def _local_policy(self) -> LocalPolicy:
        with self._lock:
            if self._local is None:
                self._local = LocalPolicy.load(self.model, self.sampling, None, name=self.model, device=self._device)
            return self._local

"""Policies for evaluation: a model whose weights are here (a local ``transformers`` model, vLLM), or an
OpenAI-compatible server.

A policy with its weights here is a :class:`TokenPolicy`: it plays episodes token in, token out through
:class:`searchenv.rollout.EpisodeDriver`, exactly the path its training took, so a checkpoint's held-out numbers
come from the token sequences it learned on (:class:`LocalPolicy`, :class:`VLLMPolicy`). A server only speaks
text: an :class:`EndpointPolicy` continues each conversation (a :class:`Context`: the prompt the environment wrote
plus the response so far) until a stop string or EOS and returns one
:class:`~searchenv.llm.client.Completion` per context.

Sampling follows the papers' evaluation: greedy (temperature 0) unless asked otherwise.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple
from typing import Protocol as TypingProtocol

from searchenv.llm.blocking import run_coroutine
from searchenv.llm.client import MODES, Completion, EndpointClient, EndpointUnavailable
from searchenv.llm.local import local_device, model_window
from searchenv.rollout.turn_generator import GeneratedTurn, TurnGenerator
from searchenv.sampling import SamplingConfig

__all__ = [
    "Context",
    "EndpointPolicy",
    "LocalPolicy",
    "Policy",
    "PolicyError",
    "TokenPolicy",
    "VLLMPolicy",
    "local_device",
]


class PolicyError(RuntimeError):
    """A policy could not produce text (dead endpoint, bad request); the message names the cause and the fix."""


class Context(NamedTuple):
    """One conversation to continue: the environment's prompt, the response so far, the tools it declares."""

    prompt: str
    response: str
    tools: tuple[str, ...] = ()  # JSON schemas (protocol.tools_json) of tool-call protocols

    @property
    def tool_schemas(self) -> list[dict[str, Any]] | None:
        return [json.loads(t) for t in self.tools] or None


class Policy(TypingProtocol):
    """A policy behind a text interface (an OpenAI-compatible endpoint): it continues a batch of conversations,
    stopping at any of ``stop`` or EOS. Policies whose weights are here are :class:`TokenPolicy`.

    Drawing several samples per question (``searchenv eval --samples K``) also needs ``seed`` and
    ``with_seed(seed)``: the same policy drawing from another seed (every policy here has them).
    """

    name: str

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Completion]: ...


def _chat_text(tokenizer: Any, context: Context, chat_template: bool | None) -> str:
    """The prompt as text, wrapped in the tokenizer's chat template when asked, with the response appended."""
    from searchenv.tokenization import render_prompt

    return render_prompt(tokenizer, context.prompt, chat_template, context.tool_schemas)[0] + context.response


class TokenPolicy(TypingProtocol):
    """A policy whose weights are here: it plays episodes token in, token out through
    :class:`searchenv.rollout.EpisodeDriver`, the path its training took (the text of a turn is never re-encoded,
    inserted passages never become special tokens)."""

    name: str
    tokenizer: Any
    sampling: SamplingConfig
    generator: TurnGenerator
    seed: int


class LocalPolicy:
    """A ``transformers`` causal LM on this machine (CPU or GPU), played through the training token path.

    Built from a checkpoint directory or a packaged alias (``smollm2-135m``) with :meth:`load`, or from a model
    already in memory (tests share one). ``chat_template`` as in :func:`searchenv.tokenization.encode_prompt`.
    ``on_tokens(n)``, when set, hears every decoding step's new tokens while a turn runs (the progress display).
    The episode's token budget is the smaller of ``sampling.max_total_tokens`` and the model's window, so a long
    episode ends as cut (``context_limit``) instead of crashing the model.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sampling: SamplingConfig,
        chat_template: bool | None,
        name: str,
        on_tokens: Callable[[int], None] | None = None,
    ):
        from searchenv.rollout import HFGenerator

        self.name = name
        self.on_tokens = on_tokens
        self.tokenizer = tokenizer
        self.seed = sampling.seed
        window = min(sampling.max_total_tokens, model_window(model))
        self.sampling = replace(sampling, max_total_tokens=window, chat_template=chat_template)
        self.generator = _Streaming(HFGenerator(model, tokenizer, self.sampling), self)

    def with_seed(self, seed: int) -> LocalPolicy:
        """This policy (the same model in memory) drawing from ``seed``: the runner seeds torch with it."""
        return _reseeded(self, seed)

    @classmethod
    def load(
        cls,
        model: str,
        sampling: SamplingConfig,
        chat_template: bool | None,
        name: str | None = None,
        device: str = "",
        on_tokens: Callable[[int], None] | None = None,
    ) -> LocalPolicy:
        from searchenv.rollout import load_policy

        lm, tokenizer = load_policy(model)
        lm.to(device or local_device())
        return cls(lm, tokenizer, sampling, chat_template, name or model, on_tokens)


class _Streaming:
    """The local engine with the policy's live token count attached to each call (the progress display)."""

    def __init__(self, engine: Any, policy: LocalPolicy):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._policy = policy

    def generate(
        self, contexts: Sequence[Sequence[int]], stop_strings: Sequence[str], max_new_tokens: Sequence[int]
    ) -> list[GeneratedTurn]:
        return self.engine.generate(contexts, stop_strings, max_new_tokens, self._policy.on_tokens)


class VLLMPolicy:
    """A ``vllm.LLM`` engine (``pip install 'searchenv[vllm]'``; GPU), played through the training token path.

    Never run in this project's tests: no GPU with vLLM was available.
    """

    def __init__(self, model: str, sampling: SamplingConfig, chat_template: bool | None, name: str | None = None):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("--policy vllm needs vLLM: pip install 'searchenv[vllm]' (GPU machines only)") from exc
        from searchenv.rollout import VLLMEngineGenerator

        self.name = name or model
        self.seed = sampling.seed
        self.sampling = replace(sampling, chat_template=chat_template)
        llm = vllm.LLM(model=model, seed=sampling.seed)
        self.tokenizer = llm.get_tokenizer()
        self.generator = VLLMEngineGenerator(llm, self.tokenizer, self.sampling)

    def with_seed(self, seed: int) -> VLLMPolicy:
        """This policy with ``seed`` recorded; the engine keeps drawing from the stream seeded when it loaded, so
        samples differ but are not tied to ``seed``."""
        return _reseeded(self, seed)


def _reseeded(policy: Any, seed: int) -> Any:
    """A shallow copy of a token policy with another ``seed`` (the model and engine are shared, not copied)."""
    other = copy.copy(policy)
    other.seed = seed
    return other


class EndpointPolicy:
    """Any OpenAI-compatible server (vLLM serve, SGLang, llama.cpp, ``transformers serve``) over HTTP, through the
    LLM client (:class:`searchenv.llm.client.EndpointClient`: one pooled connection per event loop, retries by
    the one retry policy, :mod:`searchenv.http.retry`).

    ``mode="completions"`` posts ``/v1/completions`` with the conversation as one text (wrapped in the chat
    template when ``chat_template`` is on, which needs ``tokenizer``, a local tokenizer directory). This is the
    faithful mode for search agents: the response continues inside one assistant turn, as in training.
    ``mode="chat"`` posts ``/v1/chat/completions``; after the first turn the partial assistant message is sent
    last, and continuing it needs a server that honours ``continue_final_message`` (vLLM, SGLang: pass
    ``extra_body={"continue_final_message": True, "add_generation_prompt": False}``).

    Up to ``concurrency`` requests run at once; connection errors, timeouts, 429, 502, 503 and 504 are retried
    ``retries`` times within ``retry_window`` seconds (``Retry-After`` honoured, in seconds or as an HTTP date);
    other 4xx fail at once with the server's message. The key comes from ``api_key_env`` (default
    ``OPENAI_API_KEY``) and is never logged. Servers that strip the stop string from the text (the OpenAI default)
    and report it as vLLM's ``stop_reason`` get it put back, so the environment sees a complete closing tag.
    """

    def __init__(
        self,
        url: str,
        model: str,
        sampling: SamplingConfig,
        *,
        mode: str = "completions",
        chat_template: bool | None = False,
        tokenizer: Any = None,
        concurrency: int = 8,
        retries: int = 4,
        timeout: float = 120.0,
        backoff: float = 0.5,
        retry_window: float = 300.0,
        extra_body: dict[str, Any] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        name: str | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"endpoint mode must be 'completions' or 'chat', got {mode!r}")
        if mode == "completions" and chat_template and tokenizer is None:
            raise ValueError(
                "the completions endpoint with the chat template on needs a local tokenizer (--tokenizer DIR) to "
                "apply the template; or pass --chat-template off, or use --endpoint-mode chat"
            )
        if isinstance(tokenizer, (str, os.PathLike)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.client = EndpointClient(
            url,
            model,
            sampling,
            mode=mode,
            timeout=timeout,
            retry_window=retry_window,
            retries=retries,
            backoff=backoff,
            concurrency=concurrency,
            extra_body=extra_body,
            api_key_env=api_key_env,
        )
        self.url, self.model, self.sampling, self.mode = self.client.url, model, sampling, mode
        self.chat_template = chat_template
        self.tokenizer = tokenizer
        self.retries = retries
        self.name = name or f"{model}@{self.url}"

    @property
    def seed(self) -> int:
        """The sampling seed sent with every request."""
        return self.sampling.seed

    def with_seed(self, seed: int) -> EndpointPolicy:
        """The same endpoint, requests sent with sampling seed ``seed`` (a client of its own: own pool, counters)."""
        other = copy.copy(self)
        other.sampling = replace(self.sampling, seed=seed)
        other.client = copy.copy(self.client)  # __getstate__/__setstate__: fresh transient pools
        other.client.sampling = other.sampling
        return other

    async def agenerate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Completion]:
        """One generation per context, the requests awaited concurrently on the running event loop."""
        return list(await asyncio.gather(*(self._one(context, stop) for context in contexts)))

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Completion]:
        async def once() -> list[Completion]:
            try:
                return await self.agenerate(contexts, stop)
            finally:
                await self.client.aclose()

        return run_coroutine(once)

    def check(self) -> None:
        """One one-token request (with the policy's retries), so a dead or misconfigured endpoint fails before
        any work starts."""

        async def once() -> None:
            try:
                await self._one(Context("Hello", ""), (), max_tokens=1)
            finally:
                await self.client.aclose()

        run_coroutine(once)

    async def _one(self, context: Context, stop: Sequence[str], max_tokens: int | None = None) -> Completion:
        if self.mode == "completions" and self.tokenizer is not None:
            prompt, response = _chat_text(self.tokenizer, context, self.chat_template), ""
        else:
            prompt, response = context.prompt, context.response
        try:
            reply = await self.client.acomplete(
                prompt, response=response, stop=stop, tools=context.tool_schemas, max_tokens=max_tokens
            )
        except EndpointUnavailable as exc:
            raise PolicyError(self._explain(exc)) from None
        return reply

    def _explain(self, error: EndpointUnavailable) -> str:
        """The operator's message for a request that got no generation: the cause and the fix."""
        if error.kind in ("refused", "unauthorized"):
            return f"{error.endpoint} rejected the request ({error.reason}); check --endpoint-model/mode"
        if error.kind == "bad_response":
            return f"{error.endpoint}: {error.reason}"
        return (
            f"the endpoint {self.url} did not answer after {error.attempts} tries ({error.reason}); is the server "
            "running and reachable? (finished episodes are kept; rerun the same command to resume)"
        )

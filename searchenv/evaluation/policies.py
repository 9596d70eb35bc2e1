"""Policies for evaluation: a model whose weights are here (a local ``transformers`` model, vLLM), or an
OpenAI-compatible server.

A policy with its weights here is a :class:`TokenPolicy`: it plays episodes token in, token out through
:class:`searchenv.rollout.EpisodeDriver`, exactly the path its training took, so a checkpoint's held-out numbers
come from the token sequences it learned on (:class:`LocalPolicy`, :class:`VLLMPolicy`). A server only speaks
text: an :class:`EndpointPolicy` continues each conversation (a :class:`Context`: the prompt the environment wrote
plus the response so far) until a stop string or EOS and returns one :class:`Generation` per context.

Sampling follows the papers' evaluation: greedy (temperature 0) unless asked otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from typing import Protocol as TypingProtocol

from searchenv.rollout.sampling import GeneratedTurn, SamplingConfig, TurnGenerator

__all__ = [
    "Context",
    "EndpointPolicy",
    "EvalSampling",
    "Generation",
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


@dataclass(frozen=True)
class Generation:
    """What a policy wrote for one context.

    ``num_tokens`` is the number of tokens the model generated (the engine's count; an endpoint's
    ``usage.completion_tokens``). ``finish_reason``: ``"stop"`` (stop string or EOS), ``"length"`` (the per-turn
    cap) or ``"context_full"`` (no room left in the model's window; nothing was generated).
    """

    text: str
    num_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class EvalSampling:
    """Decoding settings for evaluation (the papers evaluate at low temperature; 0 = greedy)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    max_total_tokens: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"temperature must be >= 0 and top_p in (0, 1]; got {self.temperature}, {self.top_p}")
        if self.max_new_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError("max_new_tokens must be >= 1 and max_total_tokens >= 2")


class Policy(TypingProtocol):
    """A policy behind a text interface (an OpenAI-compatible endpoint): it continues a batch of conversations,
    stopping at any of ``stop`` or EOS. Policies whose weights are here are :class:`TokenPolicy`."""

    name: str

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]: ...


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
        sampling: EvalSampling,
        chat_template: bool | None,
        name: str,
        on_tokens: Callable[[int], None] | None = None,
    ):
        from searchenv.rollout import HFGenerator

        self.name = name
        self.on_tokens = on_tokens
        self.tokenizer = tokenizer
        self.seed = sampling.seed
        self.sampling = SamplingConfig(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            max_total_tokens=min(sampling.max_total_tokens, _model_window(model)),
            chat_template=chat_template,
        )
        self.generator = _Streaming(HFGenerator(model, tokenizer, self.sampling), self)

    @classmethod
    def load(
        cls,
        model: str,
        sampling: EvalSampling,
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


def local_device() -> str:
    """Where a local policy runs unless ``--device`` says otherwise: the GPU when there is one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_window(model: Any) -> int:
    """The model's context length, so long episodes end as truncated instead of crashing the engine."""
    return int(getattr(model.config, "max_position_embeddings", None) or 1 << 30)


class VLLMPolicy:
    """A ``vllm.LLM`` engine (``pip install 'searchenv[vllm]'``; GPU), played through the training token path.

    Never run in this project's tests: no GPU with vLLM was available.
    """

    def __init__(self, model: str, sampling: EvalSampling, chat_template: bool | None, name: str | None = None):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("--policy vllm needs vLLM: pip install 'searchenv[vllm]' (GPU machines only)") from exc
        from searchenv.rollout import VLLMEngineGenerator

        self.name = name or model
        self.seed = sampling.seed
        s = sampling
        self.sampling = SamplingConfig(
            s.temperature, s.top_p, s.max_new_tokens, s.max_total_tokens, chat_template=chat_template
        )
        llm = vllm.LLM(model=model, seed=sampling.seed)
        self.tokenizer = llm.get_tokenizer()
        self.generator = VLLMEngineGenerator(llm, self.tokenizer, self.sampling)


class EndpointPolicy:
    """Any OpenAI-compatible server (vLLM serve, SGLang, llama.cpp, ``transformers serve``) over HTTP.

    ``mode="completions"`` posts ``/v1/completions`` with the conversation as one text (wrapped in the chat
    template when ``chat_template`` is on, which needs ``tokenizer``, a local tokenizer directory). This is the
    faithful mode for search agents: the response continues inside one assistant turn, as in training.
    ``mode="chat"`` posts ``/v1/chat/completions``; after the first turn the partial assistant message is sent
    last, and continuing it needs a server that honours ``continue_final_message`` (vLLM, SGLang: pass
    ``extra_body={"continue_final_message": True, "add_generation_prompt": False}``).

    Up to ``concurrency`` requests run at once; connection errors, timeouts, 429 and 5xx are retried
    ``retries`` times with exponential backoff (honouring ``Retry-After``); other 4xx fail at once with the
    server's message. The key comes from ``api_key_env`` (default ``OPENAI_API_KEY``) and is never logged.
    Servers that strip the stop string from the text (the OpenAI default) and report it as vLLM's
    ``stop_reason`` get it put back, so the environment sees a complete closing tag.
    """

    def __init__(
        self,
        url: str,
        model: str,
        sampling: EvalSampling,
        *,
        mode: str = "completions",
        chat_template: bool | None = False,
        tokenizer: Any = None,
        concurrency: int = 8,
        retries: int = 4,
        timeout: float = 120.0,
        backoff: float = 0.5,
        extra_body: dict[str, Any] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        name: str | None = None,
    ):
        if mode not in ("completions", "chat"):
            raise ValueError(f"endpoint mode must be 'completions' or 'chat', got {mode!r}")
        if mode == "completions" and chat_template and tokenizer is None:
            raise ValueError(
                "the completions endpoint with the chat template on needs a local tokenizer (--tokenizer DIR) to "
                "apply the template; or pass --chat-template off, or use --endpoint-mode chat"
            )
        if isinstance(tokenizer, (str, os.PathLike)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.url = url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.model = model
        self.sampling = sampling
        self.mode = mode
        self.chat_template = chat_template
        self.tokenizer = tokenizer
        self.concurrency = concurrency
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.extra_body = dict(extra_body or {})
        self._api_key = os.environ.get(api_key_env)
        self.name = name or f"{model}@{self.url}"

    # -- requests ---------------------------------------------------------------------------------------------
    def _body(self, context: Context, stop: Sequence[str], max_tokens: int | None = None) -> tuple[str, dict]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens or self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "seed": self.sampling.seed,
        }
        if stop:  # some servers fail on an empty list
            body["stop"] = list(stop)
        if self.mode == "completions":
            text = _chat_text(self.tokenizer, context, self.chat_template) if self.tokenizer else None
            body["prompt"] = text if text is not None else context.prompt + context.response
            path = "/v1/completions"
        else:
            messages = [{"role": "user", "content": context.prompt}]
            if context.response:
                messages.append({"role": "assistant", "content": context.response})
            body["messages"] = messages
            if context.tools:
                body["tools"] = context.tool_schemas
            path = "/v1/chat/completions"
        body.update(self.extra_body)
        return path, body

    async def _post(self, client: Any, path: str, body: dict) -> dict:
        import httpx

        last = ""
        for attempt in range(self.retries + 1):
            delay = self.backoff * 2**attempt * (1 + 0.25 * random.random())
            try:
                response = await client.post(self.url + path, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except json.JSONDecodeError:
                        raise PolicyError(f"{self.url}{path} answered 200 with a body that is not JSON") from None
                last = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code != 429 and response.status_code < 500:
                    raise PolicyError(f"{self.url}{path} rejected the request ({last}); check --endpoint-model/mode")
                retry_after = response.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, float(retry_after))
            if attempt < self.retries:
                await asyncio.sleep(delay)
        raise PolicyError(
            f"the endpoint {self.url} did not answer after {self.retries + 1} tries ({last}); is the server running "
            "and reachable? (finished episodes are kept; rerun the same command to resume)"
        )

    def _parse(self, reply: dict, stop: Sequence[str]) -> Generation:
        try:
            choice = reply["choices"][0]
            text = choice["text"] if self.mode == "completions" else (choice["message"].get("content") or "")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise PolicyError(f"{self.url}: not an OpenAI-compatible reply: {str(reply)[:300]}") from None
        matched = choice.get("stop_reason")
        if isinstance(matched, str) and matched in stop and not any(s in text for s in stop):
            text += matched  # the server removed the stop string it stopped at
        usage = reply.get("usage") or {}
        tokens = int(usage.get("completion_tokens") or 0)
        return Generation(text, tokens, "length" if choice.get("finish_reason") == "length" else "stop")

    async def agenerate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]:
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers, limits=limits) as client:

            async def one(context: Context) -> Generation:
                path, body = self._body(context, stop)
                async with gate:
                    return self._parse(await self._post(client, path, body), stop)

            return list(await asyncio.gather(*(one(c) for c in contexts)))

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]:
        return asyncio.run(self.agenerate(contexts, stop))

    def check(self) -> None:
        """One one-token request, so a dead or misconfigured endpoint fails before any work starts."""
        import httpx

        async def probe() -> None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            async with httpx.AsyncClient(timeout=self.timeout, headers=headers) as client:
                path, body = self._body(Context("Hello", ""), [], max_tokens=1)
                await self._post(client, path, body)

        asyncio.run(probe())

"""Policies for evaluation: one batched text interface over a local model, vLLM, or an OpenAI-compatible server.

The evaluation loop only needs "continue each conversation until a stop string or EOS". A :class:`Context` is the
prompt the environment wrote plus the response so far (model turns and inserted blocks); a policy returns one
:class:`Generation` per context. Token-level training rollouts live in :mod:`searchenv.adapters.rollout.generation`;
the local-model and vLLM policies here reuse its engines (:class:`~searchenv.adapters.rollout.generation.HFGenerator`,
:class:`~searchenv.adapters.rollout.generation.VLLMGenerator`) and
:func:`~searchenv.adapters.rollout.generation.load_policy`.

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

from searchenv.evaluation.progress import TokenCounter

__all__ = [
    "Context",
    "EndpointPolicy",
    "EvalSampling",
    "Generation",
    "LocalPolicy",
    "Policy",
    "PolicyError",
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
    """Anything that continues a batch of conversations, stopping at any of ``stop`` or EOS."""

    name: str

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]: ...


def _prompt_ids(tokenizer: Any, context: Context, chat_template: bool | None) -> list[int]:
    from searchenv.tokenization import encode_prompt

    ids = encode_prompt(tokenizer, context.prompt, chat_template=chat_template, tools=context.tool_schemas)
    if context.response:
        ids += tokenizer(context.response, add_special_tokens=False)["input_ids"]
    return ids


def _chat_text(tokenizer: Any, context: Context, chat_template: bool | None) -> str:
    """The prompt as text, wrapped in the tokenizer's chat template when asked, with the response appended."""
    from searchenv.tokenization import render_prompt

    return render_prompt(tokenizer, context.prompt, chat_template, context.tool_schemas)[0] + context.response


class LocalPolicy:
    """A ``transformers`` causal LM on this machine (CPU or GPU), batched with left padding.

    Built from a checkpoint directory or a packaged alias (``smollm2-135m``) with :meth:`load`, or from a model
    already in memory (tests share one). ``chat_template`` as in :func:`searchenv.tokenization.encode_prompt`.
    ``on_tokens(n)``, when set, hears every decoding step's new tokens while a turn runs (the progress display).
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
        from searchenv.adapters.rollout.generation import HFGenerator, SamplingConfig

        self.name = name
        self.on_tokens = on_tokens
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.chat_template = chat_template
        self.max_total_tokens = min(sampling.max_total_tokens, _model_window(model))
        config = SamplingConfig(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            max_total_tokens=self.max_total_tokens,
        )
        self._generator = HFGenerator(model, tokenizer, config)

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
        from searchenv.adapters.rollout.generation import load_policy

        lm, tokenizer = load_policy(model)
        lm.to(device or local_device())
        return cls(lm, tokenizer, sampling, chat_template, name or model, on_tokens)

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]:
        import torch

        torch.manual_seed(self.sampling.seed)
        ids = [_prompt_ids(self.tokenizer, c, self.chat_template) for c in contexts]
        caps = [min(self.sampling.max_new_tokens, self.max_total_tokens - len(i)) for i in ids]
        out = [Generation("", 0, "context_full")] * len(contexts)
        rows = [r for r, cap in enumerate(caps) if cap > 0]
        if rows:
            counter = TokenCounter(self.tokenizer.pad_token_id, self.on_tokens) if self.on_tokens else None
            turns = self._generator.generate([ids[r] for r in rows], list(stop), [caps[r] for r in rows], counter)
            for r, turn in zip(rows, turns):
                text = self.tokenizer.decode(turn.token_ids, skip_special_tokens=True)
                hit_cap = len(turn.token_ids) >= caps[r] and not any(s in text for s in stop)
                out[r] = Generation(text, len(turn.token_ids), "length" if hit_cap else "stop")
        return out


def local_device() -> str:
    """Where a local policy runs unless ``--device`` says otherwise: the GPU when there is one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_window(model: Any) -> int:
    """The model's context length, so long episodes end as truncated instead of crashing the engine."""
    return int(getattr(model.config, "max_position_embeddings", None) or 1 << 30)


class VLLMPolicy:
    """A ``vllm.LLM`` engine (``pip install 'searchenv[vllm]'``; GPU). Untested here: no GPU with vLLM was available.

    Reuses :class:`~.generation.VLLMGenerator` (stop strings enforced by the engine and kept in
    the output).
    """

    def __init__(self, model: str, sampling: EvalSampling, chat_template: bool | None, name: str | None = None):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("--policy vllm needs vLLM: pip install 'searchenv[vllm]' (GPU machines only)") from exc
        from searchenv.adapters.rollout.generation import SamplingConfig, VLLMGenerator

        self.name = name or model
        self.sampling = sampling
        self.chat_template = chat_template
        llm = vllm.LLM(model=model, seed=sampling.seed)
        self.tokenizer = llm.get_tokenizer()
        s = sampling
        config = SamplingConfig(s.temperature, s.top_p, s.max_new_tokens, s.max_total_tokens)
        self._generator = VLLMGenerator(llm, self.tokenizer, config)

    def generate(self, contexts: Sequence[Context], stop: Sequence[str]) -> list[Generation]:  # pragma: no cover
        ids = [_prompt_ids(self.tokenizer, c, self.chat_template) for c in contexts]
        caps = [min(self.sampling.max_new_tokens, self.sampling.max_total_tokens - len(i)) for i in ids]
        out = [Generation("", 0, "context_full")] * len(contexts)
        rows = [r for r, cap in enumerate(caps) if cap > 0]
        for r, turn in zip(rows, self._generator.generate([ids[r] for r in rows], list(stop), [caps[r] for r in rows])):
            text = self.tokenizer.decode(turn.token_ids, skip_special_tokens=True)
            out[r] = Generation(text, len(turn.token_ids), "length" if len(turn.token_ids) >= caps[r] else "stop")
        return out


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

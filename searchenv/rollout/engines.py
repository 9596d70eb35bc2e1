"""Inference engines behind :class:`~searchenv.rollout.turn_generator.TurnGenerator`.

:class:`HFGenerator` wraps a ``transformers`` causal LM (runs anywhere, including CPU); :class:`VLLMGenerator`
wraps TRL's vLLM wrapper and :class:`VLLMEngineGenerator` an in-process ``vllm.LLM`` (``searchenv[vllm]``
extra, GPU only). SkyRL/veRL glue can plug its own engine in by
implementing :meth:`~searchenv.rollout.turn_generator.TurnGenerator.generate`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from searchenv.rollout.kv_cache import cache_keyword, growing_cache
from searchenv.rollout.turn_generator import GeneratedTurn
from searchenv.sampling import SamplingConfig

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HFGenerator", "VLLMEngineGenerator", "VLLMGenerator", "draw"]


class HFGenerator:
    """Batched sampling with a ``transformers`` causal LM: a decoding loop of its own over one KV cache that is kept
    between calls, so the turns of an episode never prefill its context again.

    Each call matches every context to the cached row that shares its longest prefix (the same episode's previous
    turn: prompt, earlier turns, the action just sampled) and feeds the model only what is new since (the
    environment's block, the next turn's first token). Rows of one batch sit at different lengths: a 2-D attention
    mask marks which cache slots each row reads and position ids count its own tokens, so padding anywhere costs
    memory but never changes a result. The cache is dropped when the weights change and replaced by each call's rows,
    so it holds one batch at most. A change is detected by the parameters' version counters and storage (an
    optimizer step, ``load_state_dict``, ``torch.no_grad(): p.copy_(w)``, ``p.data = w``); a write *through*
    ``p.data`` in place (``p.data.copy_(w)``, as some external weight syncs do) changes neither, so whoever writes
    weights that way calls :meth:`refresh` after it.

    Log-probabilities are taken from the processed distribution (after temperature and top-p, as ``transformers``'
    ``TopPLogitsWarper`` cuts it): the log-probability of each sampled token under the distribution it was drawn
    from. ``temperature=0`` is greedy.

    ``dtype`` (e.g. ``torch.bfloat16``) samples from a copy of the weights in that precision, made again whenever the
    weights change: a training loop keeps float32 masters and samples from the copy, as trainers sample from a bf16
    inference engine. It pays on GPUs and on CPUs with bf16 units (AMX, or AVX-512 bf16): on a CPU with AMX a bf16
    copy decoded about twice as fast and prefilled about four times as fast as float32 (docs/benchmarks.md). A CPU
    with neither converts bf16 in software and is better left in float32 (``dtype=None``; ``--no-bf16`` on the
    command line). Autocast would instead convert every weight on every decoding step. The sampled tokens'
    log-probabilities are then the copy's.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingConfig,
        dtype: Any = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.dtype = dtype
        self._copy: tuple[tuple[int, int], Any] | None = None  # (weights version, the copy in ``dtype``)
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token = tokenizer.eos_token first")
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids: set[int] = set(eos if isinstance(eos, list) else [eos]) - {None}
        self._cache = _PrefixCache()

    def refresh(self) -> None:
        """Forget the KV cache and the ``dtype`` copy: the weights changed in a way no counter shows (an in-place
        write through ``param.data``). The next call prefills its contexts and copies the weights again."""
        self._copy = None
        self._cache = _PrefixCache()

    def generate(
        self,
        contexts: Sequence[Sequence[int]],
        stop_strings: Sequence[str],
        max_new_tokens: Sequence[int],
        on_tokens: Callable[[int], None] | None = None,
    ) -> list[GeneratedTurn]:
        """``on_tokens(n)``: hears the number of rows that got a new token, at every decoding step (progress)."""
        import torch

        if not contexts:  # a rank with no episode left still takes part in a synchronised turn
            return []
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return self._generate([list(c) for c in contexts], list(stop_strings), list(max_new_tokens), on_tokens)
        finally:
            model.train(was_training)

    def _sampler(self, version: tuple[int, int]) -> Any:
        """The model that samples: the training model, or its copy in ``dtype`` for these weights."""
        if self.dtype is None or self.dtype == next(self.model.parameters()).dtype:
            return self.model
        if self._copy is None or self._copy[0] != version:
            self._copy = None  # the old copy goes before the new one is made
            self._copy = (version, copy.deepcopy(self.model).to(self.dtype).eval())
        return self._copy[1]

    def _generate(
        self, contexts: list[list[int]], stops: list[str], caps: list[int], on_tokens: Callable[[int], None] | None
    ) -> list[GeneratedTurn]:
        import torch

        device = self.model.device
        version = _weights_version(self.model)
        model = self._sampler(version)
        # Identical contexts (a GRPO group's first turn: one prompt, many samples) are fed once, then copied.
        distinct = list(dict.fromkeys(map(tuple, contexts)))
        first = [list(c) for c in distinct]
        cache = self._cache.prepare(first, version, device)
        logits = cache.feed(model, [c[len(c) - n :] for c, n in zip(first, cache.new_counts)], self._pad)
        if len(distinct) < len(contexts):
            where = {c: i for i, c in enumerate(distinct)}
            index = torch.tensor([where[tuple(c)] for c in contexts], device=device)
            cache.select(index)
            logits = logits.index_select(0, index)
        rows = len(contexts)
        generated: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        window = max((len(s) for s in stops), default=0) + 2  # tokens to decode when looking for a stop string
        working = [r for r in range(rows) if caps[r] > 0]  # the cache's rows, as rows of this call
        parked: list[tuple[_Batch, list[int]]] = []  # rows done decoding, set aside with their cache
        if len(working) < rows:
            idle = [r for r in range(rows) if caps[r] <= 0]
            parked.append((cache.split(idle), idle))
            logits = logits[working]
        alive = [True] * len(working)
        while working:
            tokens, token_logprobs = self._sample(logits)
            live = sum(alive)
            for position, row in enumerate(working):
                if not alive[position]:
                    continue
                token = int(tokens[position])
                generated[row].append(token)
                logprobs[row].append(float(token_logprobs[position]))
                ended = token in self.eos_ids or len(generated[row]) >= caps[row]
                alive[position] = not (ended or _stopped(self, generated[row], stops, window))
            if on_tokens is not None:
                on_tokens(live)
            if not any(alive):
                break
            done = [p for p, a in enumerate(alive) if not a]
            if 2 * len(done) >= len(working):  # half the batch is done: decode the rest without it
                parked.append((cache.split(done), [working[p] for p in done]))
                kept = [p for p, a in enumerate(alive) if a]
                working, tokens, alive = [working[p] for p in kept], tokens[kept], [True] * len(kept)
            feed = [[int(tokens[p])] if alive[p] else [] for p in range(len(working))]
            logits = cache.feed(model, feed, self._pad)
        cache.merge(parked, working, rows)
        self._cache.keep(cache, [c + g[:-1] if g else c for c, g in zip(contexts, generated)])
        return [GeneratedTurn(ids, lps) for ids, lps in zip(generated, logprobs)]

    @property
    def _pad(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def _sample(self, logits: Any) -> tuple[Any, Any]:
        """One token per row and its log-probability under the processed distribution."""
        logits = logits.float()
        if self.sampling.temperature == 0:
            logprobs = logits.log_softmax(-1)
            tokens = logprobs.argmax(-1)
            return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
        logits = logits / self.sampling.temperature
        if self.sampling.top_p < 1:
            ordered, order = logits.sort(-1)
            cumulative = ordered.softmax(-1).cumsum(-1)
            remove = cumulative <= 1 - self.sampling.top_p
            remove[:, -1] = False  # the most likely token always stays
            logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
        logprobs = logits.log_softmax(-1)
        tokens = draw(logprobs)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def draw(logprobs: Any) -> Any:
    """One token per row of ``logprobs`` (``[rows, vocabulary]``), drawn from its distribution by inverting the
    cumulative distribution at one uniform number per row.

    ``torch.multinomial`` draws an exponential number for every entry of the vocabulary (about 50k a row); one
    uniform a row is the same distribution at a fraction of the cost. The cumulative sum runs in float64, so a
    token is lost to rounding only below a probability of about 1e-16 (in float32 the tail under ~3e-8 a token
    would never be drawn); a token of probability 0 (cut by top-p) is never drawn.
    """
    import torch

    cumulative = logprobs.double().exp().cumsum(-1)
    uniform = torch.rand((logprobs.shape[0], 1), dtype=torch.float64, device=logprobs.device)
    # ``right``: the first token whose cumulative mass exceeds the number, so never one of probability 0; the
    # number is below the total (a uniform in [0, 1) times the total rounds below it), so a token always exceeds it.
    return torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True).squeeze(-1)


def _stopped(generator: HFGenerator, ids: list[int], stops: list[str], window: int) -> bool:
    """Whether the turn's text now holds a stop string (only the last ``window`` tokens can complete one)."""
    if not stops:
        return False
    tail = generator.tokenizer.decode(ids[-window:], skip_special_tokens=False)
    return any(stop in tail for stop in stops)


def _weights_version(model: Any) -> tuple[int, int]:
    """A key that changes whenever a parameter is updated in place (an optimizer step, ``load_state_dict``) or
    given new storage (``p.data = w``); writes through ``p.data`` in place need :meth:`HFGenerator.refresh`."""
    parameters = list(model.parameters())
    return sum(p._version for p in parameters), hash(tuple(p.data_ptr() for p in parameters))


class _PrefixCache:
    """The KV cache of the last batch, one row per context it was given, and the token ids each row holds."""

    def __init__(self) -> None:
        self.layers: list[tuple[Any, Any]] = []  # (keys, values) per layer: [rows, heads, slots, head_dim]
        self.mask: Any = None  # [rows, slots]: 1 where a row's slot holds one of its tokens
        self.rows: list[list[int]] = []
        self.version: tuple[int, int] | None = None

    def prepare(self, contexts: list[list[int]], version: tuple[int, int], device: Any) -> _Batch:
        """A batch cache for ``contexts``: each starts from the cached row sharing its longest prefix (at least the
        context's last token is always fed again, to get its logits), or from nothing."""
        import torch

        if version != self.version or not self.rows:
            self.layers, self.mask, self.rows, self.version = [], None, [], version
        sources, reused = [], []
        for context in contexts:
            best, length = -1, 0
            for r, row in enumerate(self.rows):
                common = _common_prefix(row, context)
                if common > length:
                    best, length = r, common
            length = min(length, len(context) - 1)
            sources.append(best)
            reused.append(max(length, 0))
        if not self.layers or all(s < 0 for s in sources):
            return _Batch([], torch.zeros((len(contexts), 0), dtype=torch.long, device=device), reused, contexts)
        index = torch.tensor([max(s, 0) for s in sources], device=device)
        mask = self.mask.index_select(0, index).clone()
        keep = torch.tensor(reused, device=device)[:, None]
        mask = mask * (mask.cumsum(-1) <= keep)  # a row reads only its shared prefix
        slots = mask.any(0).nonzero().flatten()  # slots no row reads are dropped
        mask = mask.index_select(1, slots)
        layers = [
            (k.index_select(0, index).index_select(2, slots), v.index_select(0, index).index_select(2, slots))
            for k, v in self.layers
        ]
        return _Batch(layers, mask, reused, contexts)

    def keep(self, batch: _Batch, rows: list[list[int]]) -> None:
        self.layers, self.mask, self.rows = batch.layers, batch.mask, rows


class _Batch:
    """One call's cache: rows aligned with the call's contexts, grown by :meth:`feed`."""

    def __init__(self, layers: list[tuple[Any, Any]], mask: Any, reused: list[int], contexts: list[list[int]]):
        self.cache = growing_cache(layers)
        self.mask = mask
        self.new_counts = [len(c) - n for c, n in zip(contexts, reused)]

    @property
    def layers(self) -> list[tuple[Any, Any]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    def select(self, index: Any) -> None:
        """Rows ``index`` of this batch (a row may be taken several times)."""
        self.cache = growing_cache([(k.index_select(0, index), v.index_select(0, index)) for k, v in self.layers])
        self.mask = self.mask.index_select(0, index)

    def split(self, positions: list[int]) -> _Batch:
        """Take the rows at ``positions`` out of this batch (they stop decoding) and return them as a batch."""
        import torch

        taken = torch.tensor(positions, dtype=torch.long, device=self.mask.device)
        leaving = set(positions)
        staying = [p for p in range(self.mask.shape[0]) if p not in leaving]  # none when every row's cap is 0
        kept = torch.tensor(staying, dtype=torch.long, device=taken.device)
        out = _Batch.__new__(_Batch)
        out.cache = growing_cache([(k.index_select(0, taken), v.index_select(0, taken)) for k, v in self.layers])
        out.mask, out.new_counts = self.mask.index_select(0, taken), []
        self.cache = growing_cache([(k.index_select(0, kept), v.index_select(0, kept)) for k, v in self.layers])
        self.mask = self.mask.index_select(0, kept)
        return out

    def merge(self, parked: list[tuple[_Batch, list[int]]], working: list[int], rows: int) -> None:
        """Put the parked rows back beside the working ones, in the call's row order: every part is padded with
        unread slots to the longest part, so each row keeps the cache of everything it was fed."""
        import torch

        if not parked:
            return
        parts = [(b.layers, b.mask, order) for b, order in parked] + [(self.layers, self.mask, working)]
        slots = max(mask.shape[1] for _, mask, _ in parts)
        place = {row: i for i, row in enumerate(row for _, _, rows_of in parts for row in rows_of)}
        index = torch.tensor([place[r] for r in range(rows)], device=self.mask.device)

        def padded(tensor: Any, dim: int) -> Any:
            missing = slots - tensor.shape[dim]
            if not missing:
                return tensor
            shape = list(tensor.shape)
            shape[dim] = missing
            return torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)

        mask = torch.cat([padded(m, 1) for _, m, _ in parts]).index_select(0, index)
        layers = []
        for layer in range(len(self.layers)):
            keys = torch.cat([padded(ls[layer][0], 2) for ls, _, _ in parts]).index_select(0, index)
            values = torch.cat([padded(ls[layer][1], 2) for ls, _, _ in parts]).index_select(0, index)
            layers.append((keys, values))
        self.cache, self.mask = growing_cache(layers), mask

    def feed(self, model: Any, pieces: list[list[int]], pad: int) -> Any:
        """Run ``pieces`` (new ids per row, right-aligned, padding before) through the model over the cache; returns
        the logits after each row's last new id."""
        import torch

        device = self.mask.device
        width = max(len(p) for p in pieces)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in pieces], dtype=torch.long, device=device)
        new = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in pieces], dtype=torch.long, device=device)
        mask = torch.cat([self.mask, new], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -width:]
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(model): self.cache},
        )
        self.mask = mask
        return out.logits[:, -1]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


class VLLMGenerator:
    """The same interface over TRL's vLLM wrapper (``trainer.vllm_generation``, a ``trl`` ``VLLMGeneration``).

    Generation goes through the wrapper, not the engine under it, because the wrapper wakes a sleeping
    colocated engine (re-pushing the training weights), gathers prompts across tensor-parallel ranks and slices
    the results back, and in ``server`` mode talks to ``trl vllm-serve``. Per turn, the protocol's stop strings
    (kept in the output, so the environment parses a complete action) and the turn's token cap are set on the
    wrapper's ``generation_kwargs`` / ``max_completion_length`` for that call only; temperature and top-p are the
    trainer's. Each row is then cut to its own cap.

    Written against TRL 1.x's ``VLLMGeneration.generate(prompts, images, num_generations)``; vLLM needs a GPU
    and was never run in this project's tests.
    """

    def __init__(self, vllm_generation: Any, tokenizer: PreTrainedTokenizerBase):
        self.vllm_generation = vllm_generation
        self.tokenizer = tokenizer

    def generate(
        self, contexts: Sequence[Sequence[int]], stop_strings: Sequence[str], max_new_tokens: Sequence[int]
    ) -> list[GeneratedTurn]:  # pragma: no cover - needs vLLM and a GPU
        wrapper = self.vllm_generation
        saved = (wrapper.generation_kwargs, wrapper.max_completion_length)
        cap = max(max_new_tokens, default=1)
        wrapper.generation_kwargs = {
            **(saved[0] or {}),
            "stop": list(stop_strings),
            "include_stop_str_in_output": True,
            "max_tokens": cap,
        }
        wrapper.max_completion_length = cap
        try:
            _, completion_ids, logprobs, logprob_token_ids = wrapper.generate(
                prompts=[list(c) for c in contexts], images=None, num_generations=1
            )
        finally:
            wrapper.generation_kwargs, wrapper.max_completion_length = saved
        turns = []
        for row, row_cap in enumerate(max_new_tokens):
            ids = list(completion_ids[row])[:row_cap]
            row_logprobs = []
            for t, token in enumerate(ids):
                # Each position lists (logprob, token id) pairs by rank; the sampled token is always among them.
                ranked = zip(logprobs[row][t], logprob_token_ids[row][t]) if logprobs is not None else ()
                row_logprobs.append(next((float(lp) for lp, tok in ranked if tok == token and lp is not None), 0.0))
            turns.append(GeneratedTurn(ids, row_logprobs))
        return turns


class VLLMEngineGenerator:
    """The same interface over an in-process ``vllm.LLM`` (evaluation's ``--policy vllm``): token ids in as
    ``TokensPrompt``, the protocol's stop strings kept in the output (the environment parses a complete action),
    and each sampled id's log-probability (``logprobs=0`` asks vLLM for the sampled token's alone).

    Needs vLLM and a GPU; never run in this project's tests.
    """

    def __init__(self, llm: Any, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig):
        self.llm = llm
        self.tokenizer = tokenizer
        self.sampling = sampling

    def generate(
        self, contexts: Sequence[Sequence[int]], stop_strings: Sequence[str], max_new_tokens: Sequence[int]
    ) -> list[GeneratedTurn]:  # pragma: no cover - needs vLLM and a GPU
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not contexts:
            return []
        params = [
            SamplingParams(
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                max_tokens=cap,
                stop=list(stop_strings),
                include_stop_str_in_output=True,
                logprobs=0,
            )
            for cap in max_new_tokens
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(c)) for c in contexts]
        turns = []
        for output in self.llm.generate(prompts, params, use_tqdm=False):
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            ranked = completion.logprobs or [{} for _ in ids]
            logprobs = [float(entry[t].logprob) if t in entry else 0.0 for entry, t in zip(ranked, ids)]
            turns.append(GeneratedTurn(ids, logprobs))
        return turns

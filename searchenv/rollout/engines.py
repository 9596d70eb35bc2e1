"""Inference engines behind :class:`~searchenv.rollout.sampling.TurnGenerator`.

:class:`HFGenerator` wraps a ``transformers`` causal LM (runs anywhere, including CPU); :class:`VLLMGenerator`
wraps TRL's vLLM wrapper and :class:`VLLMEngineGenerator` an in-process ``vllm.LLM`` (``searchenv[vllm]``
extra, GPU only). SkyRL/veRL glue can plug its own engine in by
implementing :meth:`~searchenv.rollout.sampling.TurnGenerator.generate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from searchenv.rollout.sampling import GeneratedTurn, SamplingConfig

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HFGenerator", "VLLMEngineGenerator", "VLLMGenerator", "sampled_length"]


class HFGenerator:
    """Batched sampling with a ``transformers`` causal LM (left padding, engine-level stop strings).

    Logprobs are taken from the processed scores (after temperature and top-p), i.e. the log-probability of
    each sampled token under the distribution it was actually drawn from.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token = tokenizer.eos_token first")
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids: set[int] = set(eos if isinstance(eos, list) else [eos]) - {None}
        self._stop_criteria: dict[tuple[str, ...], Any] = {}

    def stop_criterion(self, stop_strings: Sequence[str]) -> Any:
        """``transformers``' stop-string criterion, built once per set of stop strings.

        Building one scans the whole vocabulary (0.25-0.8 CPU-seconds for SmolLM2's 49k tokens), and
        ``generate(stop_strings=...)`` builds a new one on every call, i.e. every turn of every rollout. The
        criterion keeps no state between calls (it reads the ids it is given), so one per stop set is reused.
        """
        key = tuple(stop_strings)
        if key not in self._stop_criteria:
            from transformers import StopStringCriteria

            self._stop_criteria[key] = StopStringCriteria(self.tokenizer, list(key))
        return self._stop_criteria[key]

    def generate(
        self,
        contexts: Sequence[Sequence[int]],
        stop_strings: Sequence[str],
        max_new_tokens: Sequence[int],
        streamer: Any = None,
    ) -> list[GeneratedTurn]:
        """``streamer``: a ``transformers`` streamer that sees each decoding step (evaluation's progress counter)."""
        import torch

        if not contexts:  # a rank with no episode left still takes part in a synchronised turn
            return []
        width = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(c)) + list(c) for c in contexts], dtype=torch.long)
        attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], dtype=torch.long)
        greedy = self.sampling.temperature == 0
        kwargs: dict[str, Any] = {"do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=self.sampling.temperature, top_p=self.sampling.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(self.model.device),
                attention_mask=attention.to(self.model.device),
                max_new_tokens=max(max_new_tokens),
                stopping_criteria=[self.stop_criterion(stop_strings)] if stop_strings else None,
                pad_token_id=pad,
                eos_token_id=sorted(self.eos_ids),
                output_scores=True,
                return_dict_in_generate=True,
                streamer=streamer,
                **kwargs,
            )
        self.model.train(was_training)
        new = out.sequences[:, width:].cpu()
        # (rows, steps) logprob of every sampled token under the processed (sampling) distribution.
        scores = torch.stack(out.scores, dim=1).float().log_softmax(-1).cpu()
        token_logprobs = scores.gather(-1, new[:, : scores.shape[1]].unsqueeze(-1)).squeeze(-1)
        turns = []
        for row, cap in enumerate(max_new_tokens):
            ids = new[row, :cap].tolist()
            end = sampled_length(ids, self.eos_ids, pad, stop_strings, self.tokenizer)
            turns.append(GeneratedTurn(ids[:end], token_logprobs[row, :end].tolist()))
        return turns


def sampled_length(
    ids: Sequence[int], eos_ids: set[int], pad_id: int, stop_strings: Sequence[str], tokenizer: PreTrainedTokenizerBase
) -> int:
    """How many of a row's ``generate`` output ids the model sampled (the rest is padding of a finished row).

    ``generate`` pads a row that finished early (at a stop string or EOS) with ``pad_id`` while others continue.
    A sampled EOS ends the row and is kept; but when ``pad_id`` is an EOS id, the padding looks like an EOS too.
    The first EOS is padding exactly when the text before it already contains a stop string (the row had
    stopped there), so it is dropped then and the model is never trained on a token it did not sample.
    """
    first_eos = next((i for i, t in enumerate(ids) if t in eos_ids), None)
    if first_eos is not None:
        if pad_id in eos_ids and any(s in tokenizer.decode(list(ids[:first_eos])) for s in stop_strings):
            return first_eos
        return first_eos + 1
    return next((i for i, t in enumerate(ids) if t == pad_id), len(ids))


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

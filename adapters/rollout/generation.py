"""Multi-turn rollouts of SearchQA episodes with a causal LM, token-in/token-out.

Every trainer adapter needs the same loop: feed each episode's context to the policy, sample one action per
episode (stopping at the protocol's closing tags), step all environments together, append what the
environment wrote, repeat until every episode is over. This module is that loop, written once:

- :func:`rollout` runs a batch of :class:`~searchenv.env.SearchQAEnv` instances to completion and returns one
  :class:`EpisodeResult` per environment (token ids, loss mask, sampled-token logprobs, reward, metrics).
- A :class:`TurnGenerator` is the only piece that touches an inference engine. :class:`HFGenerator` wraps a
  ``transformers`` causal LM (runs anywhere, including CPU); :class:`VLLMGenerator` wraps a ``vllm.LLM``
  (``searchenv[vllm]`` extra, GPU only). SkyRL/veRL glue can plug its own engine in by implementing
  :meth:`TurnGenerator.generate`.

Why token-in/token-out: the ids the policy sampled are kept exactly as sampled (never decoded and
re-encoded), environment text is tokenized on its own and masked out, so the loss mask lines up with what the
model actually produced (SPEC §2). When an engine runs past a closing tag, the surplus tokens are cut together
with the text the environment drops (:meth:`searchenv.tokenization.EpisodeTokens.add_action`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from searchenv.tokenization import EpisodeTokens, TokenizedEpisode, encode_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from searchenv.env.search_qa import SearchQAEnv

__all__ = [
    "EpisodeResult",
    "GeneratedTurn",
    "HFGenerator",
    "SamplingConfig",
    "TurnGenerator",
    "VLLMGenerator",
    "gguf_tokenizer",
    "load_policy",
    "make_envs",
    "read_run_settings",
    "rollout",
    "sampled_length",
    "write_run_settings",
]

#: Short names for models that ship inside pip packages (the HF hub is not reachable everywhere).
MODEL_ALIASES = ("smollm2-135m",)


@dataclass(frozen=True)
class SamplingConfig:
    """How actions are sampled.

    Attributes:
        temperature: sampling temperature; ``0`` means greedy decoding.
        top_p: nucleus sampling mass.
        max_new_tokens: cap on tokens generated per turn (Search-R1: 500).
        max_total_tokens: cap on prompt + response tokens of one episode (Search-R1: 4096).
        max_response_tokens: optional cap on response tokens (model + environment) of one episode, e.g. TRL's
            ``max_completion_length``. When an episode reaches a cap, no further action is sampled: the
            environment scores it as truncated (``env.truncate()``) and it is reported with ``truncated = 1``.
            The environment block that followed its last action is kept, so a response may exceed the cap by
            that block.
        chat_template: passed to :func:`searchenv.tokenization.encode_prompt` (``None``: use the tokenizer's
            chat template when it has one).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    max_total_tokens: int = 4096
    max_response_tokens: int | None = None
    chat_template: bool | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError("max_new_tokens must be >= 1 and max_total_tokens >= 2")
        if self.max_response_tokens is not None and self.max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1 or None, got {self.max_response_tokens}")

    def budget(self, prompt_tokens: int, response_tokens: int) -> int:
        """How many more tokens an episode may generate."""
        left = self.max_total_tokens - prompt_tokens - response_tokens
        if self.max_response_tokens is not None:
            left = min(left, self.max_response_tokens - response_tokens)
        return left


@dataclass
class GeneratedTurn:
    """What an engine produced for one context: the sampled ids and their logprobs under the sampler."""

    token_ids: list[int]
    logprobs: list[float]


class TurnGenerator(TypingProtocol):
    """An inference engine that continues a batch of token contexts until a stop string, EOS or the cap."""

    tokenizer: PreTrainedTokenizerBase

    def generate(
        self, contexts: Sequence[Sequence[int]], stop_strings: Sequence[str], max_new_tokens: Sequence[int]
    ) -> list[GeneratedTurn]:
        """Continue each context; ``max_new_tokens[i]`` caps row ``i``. Tokens past a stop string may be returned
        (the rollout cuts them); tokens after EOS must not be."""
        ...


@dataclass
class EpisodeResult:
    """One finished episode, ready for a trainer.

    Attributes:
        tokens: prompt ids, response ids (model + env, in order), loss mask and sampled-token logprobs.
        reward: the environment's terminal reward (an episode cut by the token budget is scored as truncated).
        reward_parts: named parts of the reward (``em``, ``format_ok``, ...), as the environment reported them.
        metrics: the episode's :meth:`~searchenv.episode.Episode.metrics` (``num_searches``, ``num_invalid``,
            ``end_reason/context_limit`` = 1.0 when the token budget ended it, ...) plus ``rollout/response_tokens``
            (all response ids) and ``rollout/model_tokens`` (mask 1).
        index: the dataset index the environment was reset to.
    """

    tokens: TokenizedEpisode
    reward: float
    reward_parts: dict[str, float]
    metrics: dict[str, float]
    index: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------
# Engines
# ---------------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------------
# The rollout loop
# ---------------------------------------------------------------------------------------------------------------
def rollout(
    envs: Sequence[SearchQAEnv],
    generator: TurnGenerator,
    sampling: SamplingConfig,
    *,
    indices: Sequence[int] | None = None,
    seed: int | None = None,
    turn_sync: Callable[[bool], bool] | None = None,
    on_turn: Callable[[int], Any] | None = None,
    policy_version: int | None = None,
) -> list[EpisodeResult]:
    """Play one episode in each environment with ``generator`` and return the token-level results.

    Args:
        envs: environments to reset and play, typically sharing one retriever so that each turn makes a single
            batched ``search`` call (:func:`searchenv.step_batch`).
        generator: the inference engine.
        sampling: temperature, top-p and the per-turn / per-episode token caps.
        indices: dataset index for each environment's reset (``options={"index": i}``); ``None`` lets each
            environment draw its own example from ``seed``.
        seed: seeds the environments' resets and torch's sampler, so the same call gives the same episodes.
        turn_sync: for several processes whose engine calls are collective (vLLM with tensor parallelism or
            server mode, FSDP): called once per turn with "this process still has episodes", it returns "some
            process still has episodes". A process whose episodes are over keeps calling the engine with no
            contexts until every process is done, so all processes make the same number of calls.
        on_turn: called after every engine call with the number of tokens it sampled (progress bars).
        policy_version: the weights version ``generator`` samples with (the trainer's step), recorded with every
            turn in ``episode.generations`` (:class:`~searchenv.episode.generation.Generation`), and told to each
            environment (``set_training_step``) so that schedules over training steps (a degraded engine's ``p``,
            the simulated engine's ``p_noisy``) follow the trainer.

    Returns:
        one :class:`EpisodeResult` per environment, in order.
    """
    import searchenv

    if indices is not None and len(indices) != len(envs):
        raise ValueError(f"got {len(indices)} indices for {len(envs)} environments; pass one index per environment")
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if policy_version is not None:
        for env in envs:
            env.unwrapped.set_training_step(policy_version)
    tokenizer = generator.tokenizer
    builders: list[EpisodeTokens] = []
    stop_strings: list[list[str]] = []
    for i, env in enumerate(envs):
        options = {"index": int(indices[i])} if indices is not None else None
        obs, info = env.reset(seed=None if seed is None else seed + i, options=options)
        protocol = env.unwrapped.protocol  # tool-call protocols: tools declared, tool turns framed by the template
        prompt_ids = encode_prompt(tokenizer, obs, chat_template=sampling.chat_template, tools=info.get("tools"))
        builders.append(EpisodeTokens(tokenizer, prompt_ids, protocol, episode=env.unwrapped.episode))
        stop_strings.append(list(info.get("stop_strings") or env.unwrapped.protocol.stop_strings))
    final_infos: list[dict[str, Any]] = [{} for _ in envs]
    rewards = [0.0] * len(envs)
    active = list(range(len(envs)))
    while True:
        budgets = {i: sampling.budget(len(builders[i].prompt_ids), len(builders[i].response_ids)) for i in active}
        for i in [i for i in active if budgets[i] <= 0]:
            # The token budget ended the episode: the environment still scores it, like veRL's length cut.
            _, rewards[i], _, _, final_infos[i] = envs[i].unwrapped.truncate("context_limit")
        active = [i for i in active if budgets[i] > 0]
        if turn_sync is not None and turn_sync(bool(active)) and not active:
            generator.generate([], stop_strings[0], [])
            continue
        if not active:
            break
        # Rows of one engine call share stop strings; protocols may differ between environments, so group.
        turns: dict[int, GeneratedTurn] = {}
        for stops in {tuple(stop_strings[i]) for i in active}:
            rows = [i for i in active if tuple(stop_strings[i]) == stops]
            caps = [min(sampling.max_new_tokens, budgets[i]) for i in rows]
            for i, turn in zip(rows, generator.generate([builders[i].context_ids for i in rows], stops, caps)):
                turns[i] = turn
            if on_turn is not None:
                on_turn(sum(len(turns[i].token_ids) for i in rows))
        actions = []
        for i in active:
            turn = turns[i]
            actions.append(
                builders[i].add_action(turn.token_ids, turn.logprobs, envs[i].unwrapped.protocol, policy_version)
            )
        results = searchenv.step_batch([envs[i] for i in active], actions)
        still_active = []
        for i, (obs, reward, terminated, truncated, info) in zip(active, results):
            if obs:
                builders[i].add_env(obs)
            if terminated or truncated:
                rewards[i] = float(reward)
                final_infos[i] = dict(info)
            else:
                still_active.append(i)
        active = still_active
    results_out = []
    for i, env in enumerate(envs):
        tokens = builders[i].result()
        episode = env.unwrapped.episode
        info = final_infos[i]
        parts = {k: float(v) for k, v in (info.get("reward_parts") or {}).items()}
        m = {
            **episode.metrics(),
            "rollout/response_tokens": float(len(tokens.response_ids)),
            "rollout/model_tokens": float(sum(tokens.loss_mask)),
        }
        results_out.append(
            EpisodeResult(tokens, rewards[i], parts, m, None if indices is None else int(indices[i]), info)
        )
    return results_out


def make_envs(n: int, **env_kwargs: Any) -> list[SearchQAEnv]:
    """``n`` SearchQA environments sharing one dataset and retriever (built once), so a batch turn is one search call.

    ``env_kwargs`` are :class:`~searchenv.env.SearchQAEnv` arguments (``dataset``, ``retriever``, ``reward``, ...).
    """
    import gymnasium as gym

    import searchenv

    if n < 1:
        raise ValueError(f"need at least one environment, got n={n}")
    first = gym.make(searchenv.ENV_ID, **env_kwargs).unwrapped
    return [first, *(first.sibling() for _ in range(n - 1))]


# ---------------------------------------------------------------------------------------------------------------
# Loading a policy
# ---------------------------------------------------------------------------------------------------------------
def gguf_tokenizer(gguf: Path):
    """The tokenizer stored in a GGUF file's metadata, read without the file's tensors.

    ``AutoTokenizer`` with ``gguf_file`` would also parse every tensor's header and build the model config
    (≈ 13 s against 0.7 s for SmolLM2-135M on a 2-core machine); the fast tokenizer class reads only the
    vocabulary, merges, special ids and chat template, and saves byte-identical files.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def load_policy(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None, dtype: Any = "float32"):
    """Load ``(model, tokenizer)`` from a local directory or a packaged alias (``"smollm2-135m"``).

    Weights load in ``dtype``, float32 by default whatever the checkpoint declares: they are the optimizer's
    master weights, and AdamW steps of lr 1e-6 vanish in bf16 rounding (a bf16-declared Qwen2.5 would otherwise
    train in bf16). Mixed precision belongs in autocast (``PPOConfig.autocast``, TRL's ``--bf16``), not in the
    stored weights. ``dtype=None`` keeps the checkpoint's own dtype (inference).

    A packaged GGUF model is de-quantised to a regular ``transformers`` checkpoint once (about 20 s for
    SmolLM2-135M) and saved under ``cache_dir`` (default ``$SEARCHENV_CACHE_DIR`` or ``~/.cache/searchenv``), so
    later loads take well under a second and the weights can be trained in full precision.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(name_or_path)
    if name_or_path in MODEL_ALIASES:
        from searchenv.cache import cache_root

        root = cache_root(cache_dir)
        path = root / "models" / name_or_path
        if not (path / "config.json").exists():
            from searchenv.assets import smollm2_gguf

            gguf = smollm2_gguf()
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            tokenizer = gguf_tokenizer(gguf)
            # The weights are de-quantised already; drop the GGUF marker so the checkpoint can be saved.
            model.hf_quantizer = None
            model.config.__dict__.pop("quantization_config", None)
            # Save beside the target and rename, so a concurrent or killed run never leaves half a checkpoint.
            scratch = path.with_name(f"{path.name}.partial-{os.getpid()}")
            model.save_pretrained(scratch)
            tokenizer.save_pretrained(scratch)
            try:
                scratch.rename(path)
            except OSError:  # another process finished first: its checkpoint is the same
                shutil.rmtree(scratch, ignore_errors=True)
    elif not path.exists():
        raise FileNotFoundError(
            f"no model at {name_or_path!r}: pass a local checkpoint directory or one of {list(MODEL_ALIASES)} "
            "(the Hugging Face hub is not used)"
        )
    tokenizer = AutoTokenizer.from_pretrained(path)
    if isinstance(dtype, str) and dtype != "auto":
        import torch

        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype if dtype is not None else "auto")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------------
# What a checkpoint was trained on
# ---------------------------------------------------------------------------------------------------------------
#: File written next to a checkpoint's weights by both trainers (``train-ppo``, ``train-trl``).
RUN_FILE = "searchenv_run.json"
#: Its keys: what ``eval``/``demo`` need to replay the checkpoint in the environment it was trained in.
#: ``model`` is the starting checkpoint or alias; ``config`` the trainer's full configuration.
RUN_KEYS = (
    "model",
    "protocol",
    "chat_template",
    "max_turns",
    "budget",
    "topk",
    "reward",
    "dataset",
    "split",
    "retriever",
    "retriever_options",
    "algorithm",
    "config",
)


def write_run_settings(directory: str | os.PathLike[str], settings: Mapping[str, Any], **extra: Any) -> Path:
    """Write ``searchenv_run.json`` into ``directory``: every key of :data:`RUN_KEYS` (a missing one is an error,
    so no checkpoint is saved that cannot be replayed), plus any other keys given (``max_information_words``,
    ``corpus``, ``step``)."""
    settings = {**settings, **extra}
    missing = [k for k in RUN_KEYS if k not in settings]
    if missing:
        raise ValueError(f"run settings lack {missing}; pass every key of RUN_KEYS ({', '.join(RUN_KEYS)})")
    path = Path(directory) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_run_settings(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings a checkpoint directory was trained with (see :func:`write_run_settings`)."""
    path = Path(directory) / RUN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the checkpoint was not saved by searchenv's train-ppo/train-trl")
    settings = json.loads(path.read_text())
    missing = [k for k in RUN_KEYS if k not in settings]
    if missing:
        raise ValueError(f"{path} lacks {missing}; it was written by another version of searchenv")
    return settings

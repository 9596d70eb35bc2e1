"""TRL glue: train on SearchQA-v0 with ``trl.GRPOTrainer`` through its ``rollout_func`` hook.

TRL's own tool loop speaks native chat-template tool calls, not the ``<search>``/``<information>`` text protocol,
so the episode is played by :func:`~.rollout.generation.rollout` inside ``rollout_func`` and handed back
token-in/token-out: ``prompt_ids``, ``completion_ids`` (model and environment tokens in order), ``logprobs`` and
``env_mask`` (TRL multiplies it into the loss mask, so inserted passages and hints are never trained on).
The environment's reward, its parts and the episode's metrics travel as extra keys to :func:`env_reward`, which
returns the reward the episode computed and logs the parts with TRL's ``log_metric``: completions are never
re-parsed from text (the episode knows which searches ran and what was shown).

TRL versions (:data:`TRL_REQUIREMENT`): 1.0 is the first release that calls ``rollout_func(prompts, trainer)``
without vLLM and applies ``env_mask`` in the loss; 0.28–0.29 call it only through the vLLM backend (on CPU it was
silently not used), 0.27 ignores ``env_mask`` (trains on retrieved passages), 0.25–0.26 have another
signature and 0.24 has no ``rollout_func``.

Completions end the way TRL expects: an episode the environment ended (an answer, or the action budget spent)
gets the tokenizer's EOS appended with ``env_mask`` 0 (the model did not sample it, so it is not trained on), so
TRL counts only episodes cut by the token budget as truncated (``completions/clipped_ratio``).

Usage::

    trainer = make_grpo_trainer(model, tokenizer, GRPOConfig(...), env_kwargs={"retriever": "bm25"})
    trainer.train()
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from searchenv.adapters.trl.metrics import log_episode_metrics
from searchenv.rollout import (
    EpisodeResult,
    HFGenerator,
    SamplingConfig,
    TurnGenerator,
    VLLMGenerator,
    make_envs,
    rollout,
    write_run_settings,
)

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from searchenv.env.search_qa import SearchQAEnv

__all__ = [
    "TRL_REQUIREMENT",
    "JsonlLogCallback",
    "RunSettingsCallback",
    "SearchRolloutFunc",
    "check_trl_version",
    "env_reward",
    "make_dataset",
    "make_grpo_trainer",
]

#: The TRL releases whose ``rollout_func`` / ``env_mask`` semantics this adapter relies on (see the module doc).
TRL_REQUIREMENT = ">=1.0,<2"


def check_trl_version(version: str | None = None) -> None:
    """Raise ``ImportError`` unless the installed TRL (or ``version``) satisfies :data:`TRL_REQUIREMENT`."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if version is None:
        import trl

        version = trl.__version__
    if Version(version) not in SpecifierSet(TRL_REQUIREMENT):
        raise ImportError(
            f"searchenv's TRL adapter needs trl{TRL_REQUIREMENT}, found {version}: older releases ignore env_mask "
            "or rollout_func (they would train on retrieved passages or skip the environment); "
            f"pip install 'trl{TRL_REQUIREMENT}' (note: verl[fsdp] pins trl==0.27.0, use separate environments)"
        )


def make_dataset(env: SearchQAEnv, limit: int | None = None, curriculum: bool = False, seed: int = 0) -> Dataset:
    """One row per question of ``env``'s dataset: ``prompt`` (the environment's prompt text), ``question``,
    ``golden_answers`` and ``example_index`` (what :class:`SearchRolloutFunc` resets the environment to).

    ``curriculum=True`` orders the rows by number of hops (the generated world's ``hops`` metadata), shuffled
    within each level by ``seed``: with ``GRPOConfig(shuffle_dataset=False)`` training sees 1-hop questions first.
    """
    import random

    from datasets import Dataset

    base = env.unwrapped
    examples = list(enumerate(base.examples[:limit] if limit else base.examples))
    if curriculum:
        if any("hops" not in ex.metadata for _, ex in examples):
            raise ValueError("curriculum needs every question's 'hops' metadata (the generated world has it)")
        random.Random(seed).shuffle(examples)
        examples.sort(key=lambda item: int(item[1].metadata["hops"]))
    return Dataset.from_list(
        [
            {
                "prompt": base.protocol.prompt(ex.question),
                "question": ex.question,
                "golden_answers": list(ex.golden_answers),
                "example_index": i,
            }
            for i, ex in examples
        ]
    )


class SearchRolloutFunc:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: plays one SearchQA episode per prompt.

    TRL hands the per-process prompts with each prompt already repeated ``num_generations`` times, so one
    episode per prompt is the right count. Prompts are mapped back to dataset rows by their text (the
    dataset from :func:`make_dataset` uses the environment's own prompt text), and the chat template is applied
    here, at the engine boundary, as TRL requires.

    Args:
        env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments; environments are created lazily, as many as
            the largest batch, all sharing one retriever.
        max_new_tokens: per-turn cap (SPEC: 500); the per-episode response cap is the trainer's
            ``max_completion_length``.
        chat_template: see :func:`searchenv.tokenization.encode_prompt`.
    """

    def __init__(
        self, env_kwargs: Mapping[str, Any] | None = None, max_new_tokens: int = 500, chat_template: bool | None = None
    ):
        self.env_kwargs = dict(env_kwargs or {})
        self.max_new_tokens = max_new_tokens
        self.chat_template = chat_template
        self.envs: list[SearchQAEnv] = make_envs(1, **self.env_kwargs)
        base = self.envs[0].unwrapped
        self.index_of = {base.protocol.prompt(ex.question): i for i, ex in enumerate(base.examples)}
        self.calls = 0

    def _envs_for(self, n: int) -> list[SearchQAEnv]:
        if n > len(self.envs):
            shared = {**self.env_kwargs, "retriever": self.envs[0].unwrapped.retriever}
            self.envs.extend(make_envs(n - len(self.envs), **shared))
        return self.envs[:n]

    def _generator(self, trainer: GRPOTrainer, sampling: SamplingConfig) -> TurnGenerator:
        tokenizer = trainer.processing_class
        if getattr(trainer, "use_vllm", False):
            return VLLMGenerator(trainer.vllm_generation, tokenizer)
        return HFGenerator(trainer.accelerator.unwrap_model(trainer.model), tokenizer, sampling)

    @staticmethod
    def _turn_sync(trainer: GRPOTrainer) -> Callable[[bool], bool] | None:
        """With several processes, keep engine calls in lockstep (vLLM tensor-parallel/server calls are collective)."""
        accelerator = trainer.accelerator
        if accelerator.num_processes == 1:
            return None
        import torch

        def any_active(local: bool) -> bool:
            flags = accelerator.gather(torch.tensor([int(local)], device=accelerator.device))
            return bool(flags.sum().item())

        return any_active

    @staticmethod
    def _completion(result: EpisodeResult, eos_id: int) -> tuple[list[int], list[int], list[float]]:
        """Response ids, env mask and logprobs, with an unsampled EOS (mask 0) closing an episode the env ended."""
        tokens = result.tokens
        ids, mask, logprobs = list(tokens.response_ids), list(tokens.loss_mask), list(tokens.logprobs)
        if not result.metrics["end_reason/context_limit"] and (not ids or ids[-1] != eos_id):
            ids, mask, logprobs = ids + [eos_id], mask + [0], logprobs + [0.0]
        return ids, mask, logprobs

    def __call__(self, prompts: Sequence[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        texts = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
        missing = [t[:60] for t in texts if t not in self.index_of]
        if missing:
            raise ValueError(
                f"{len(missing)} prompt(s) are not questions of the environment's dataset (e.g. {missing[0]!r}…); "
                "build the train dataset with searchenv.adapters.trl.grpo.make_dataset(env) so prompts map to questions"
            )
        args = trainer.args
        response_cap = args.max_completion_length or 10**9
        sampling = SamplingConfig(
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=min(self.max_new_tokens, response_cap),
            max_total_tokens=10**9,
            # one token of the cap is kept for the EOS that closes a finished episode
            max_response_tokens=max(response_cap - 1, 1),
            chat_template=self.chat_template,
        )
        envs = self._envs_for(len(texts))
        seed = args.seed * 1_000_003 + self.calls * trainer.accelerator.num_processes
        seed += trainer.accelerator.process_index
        self.calls += 1
        results = rollout(
            envs,
            self._generator(trainer, sampling),
            sampling,
            indices=[self.index_of[t] for t in texts],
            seed=seed,
            turn_sync=self._turn_sync(trainer),
            policy_version=int(trainer.state.global_step),
        )
        eos_id = trainer.processing_class.eos_token_id
        completions = [self._completion(r, eos_id) for r in results]
        return {
            "prompt_ids": [r.tokens.prompt_ids for r in results],
            "completion_ids": [c[0] for c in completions],
            "logprobs": [c[2] for c in completions],
            "env_mask": [c[1] for c in completions],
            "env_reward": [r.reward for r in results],
            "env_metrics": [r.metrics for r in results],
        }


def env_reward(
    completions: Sequence[Any],
    env_reward: Sequence[float] | None = None,
    env_metrics: Sequence[Mapping[str, float]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **_: Any,
) -> list[float]:
    """TRL reward function returning the reward the environment computed (it knows what it retrieved).

    Also logs the batch's episode metrics (``reward/em``, ``num_searches``, ``end_reason/answer``,
    ``rollout/model_tokens``, ...) as TRL metrics (:func:`~searchenv.adapters.trl.metrics.log_episode_metrics`).
    """
    if env_reward is None:
        raise ValueError(
            "env_reward needs the 'env_reward' column that SearchRolloutFunc returns; pass "
            "rollout_func=SearchRolloutFunc(...) to GRPOTrainer, or use reward_from_spec(...) instead"
        )
    log_episode_metrics(log_metric, env_metrics or [])
    return [float(r) for r in env_reward]


class RunSettingsCallback(TrainerCallback):
    """Writes ``searchenv_run.json`` into every checkpoint TRL saves (``output_dir/checkpoint-N``), so ``eval`` and
    ``demo`` can replay it with the environment and reward it was trained on."""

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = dict(settings)

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        if state.is_world_process_zero:
            write_run_settings(Path(args.output_dir) / f"checkpoint-{state.global_step}", self.settings)
        return control


class JsonlLogCallback(TrainerCallback):
    """Appends every TRL log row (``reward``, ``reward/em``, ``num_searches``, ...) to a ``.jsonl`` file,
    one JSON object per logging step with its ``step``, the format :func:`~searchenv.adapters.ppo.train.plot_log`
    draws."""

    def __init__(self, path: str | Path, on_line: Callable[[], None] | None = None):
        self.path = Path(path)
        self.on_line = on_line

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any) -> Any:
        if state.is_world_process_zero and logs and "reward" in logs:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}) + "\n")
            if self.on_line is not None:
                self.on_line()
        return control


def make_grpo_trainer(
    model: Any,
    tokenizer: Any,
    args: GRPOConfig,
    env_kwargs: Mapping[str, Any] | None = None,
    max_new_tokens: int = 500,
    train_limit: int | None = None,
    reward_funcs: Sequence[Callable[..., list[float]]] | None = None,
    chat_template: bool | None = None,
    curriculum: bool = False,
    run_settings: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
) -> GRPOTrainer:
    """A ``GRPOTrainer`` wired to SearchQA: dataset from the environment, multi-turn ``rollout_func``, env reward.

    Args:
        model / tokenizer: a ``transformers`` causal LM (float32 weights: ``load_policy`` loads them so) and its
            tokenizer (it needs a pad token).
        args: the ``GRPOConfig`` (``num_generations`` = group size, ``max_completion_length`` = response cap,
            ``beta`` = KL coefficient, ``learning_rate``, ``bf16`` = autocast, ...).
        env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments (dataset, retriever, reward, topk, max_turns...).
        max_new_tokens: per-turn generation cap.
        train_limit: use only the first ``train_limit`` questions.
        reward_funcs: replaces the default ``[env_reward]``; they receive the episode's ``env_reward`` and
            ``env_metrics`` (:meth:`~searchenv.episode.Episode.metrics` plus ``rollout/...`` token counts) columns.
        chat_template: see :func:`searchenv.tokenization.encode_prompt`.
        curriculum: 1-hop questions first (needs ``args.shuffle_dataset = False``, see :func:`make_dataset`).
        run_settings: written as ``searchenv_run.json`` into every checkpoint (:class:`RunSettingsCallback`).
        callbacks: more ``TrainerCallback`` objects (e.g. :class:`JsonlLogCallback`).
    """
    import os

    check_trl_version()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOTrainer

    if curriculum and args.shuffle_dataset:
        raise ValueError("curriculum=True orders the dataset by hops: set GRPOConfig(shuffle_dataset=False)")
    low = sorted(
        {str(p.dtype) for p in model.parameters() if p.requires_grad and p.dtype.is_floating_point} - {"torch.float32"}
    )
    if low:
        raise ValueError(
            f"the policy's trainable weights are {low}, not float32: load with load_policy(...) (float32 masters) "
            "and set GRPOConfig(bf16=True) for mixed precision instead"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rollout_func = SearchRolloutFunc(env_kwargs, max_new_tokens=max_new_tokens, chat_template=chat_template)
    return GRPOTrainer(
        model=model,
        reward_funcs=list(reward_funcs or [env_reward]),
        args=args,
        train_dataset=make_dataset(rollout_func.envs[0], limit=train_limit, curriculum=curriculum, seed=args.seed),
        processing_class=tokenizer,
        rollout_func=rollout_func,
        callbacks=[*([RunSettingsCallback(run_settings)] if run_settings is not None else []), *callbacks] or None,
    )

"""TRL glue: train on SearchQA-v0 with ``trl.GRPOTrainer`` through its ``rollout_func`` hook.

TRL's own tool loop speaks native chat-template tool calls, not the ``<search>``/``<information>`` text protocol,
so the episode is played by :func:`searchenv.adapters.generation.rollout` inside ``rollout_func`` and handed back
token-in/token-out: ``prompt_ids``, ``completion_ids`` (model and environment tokens in order), ``logprobs`` and
``env_mask`` (TRL multiplies it into the loss mask, so inserted passages and hints are never trained on).
The environment's reward and its parts travel as extra keys to :func:`env_reward`, which returns the reward and
logs the parts with TRL's ``log_metric``. :func:`reward_from_spec` scores a decoded completion text instead,
for runs where completions come from elsewhere.

Usage::

    trainer = make_grpo_trainer(model, tokenizer, GRPOConfig(...), env_kwargs={"retriever": "bm25"})
    trainer.train()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from searchenv.adapters.generation import (
    HFGenerator,
    SamplingConfig,
    TurnGenerator,
    VLLMGenerator,
    make_envs,
    rollout,
)

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from searchenv.env import SearchQAEnv

__all__ = ["SearchRolloutFunc", "env_reward", "make_dataset", "make_grpo_trainer", "reward_from_spec"]


def make_dataset(env: SearchQAEnv, limit: int | None = None) -> Dataset:
    """One row per question of ``env``'s dataset: ``prompt`` (the environment's prompt text), ``question``,
    ``golden_answers`` and ``example_index`` (what :class:`SearchRolloutFunc` resets the environment to)."""
    from datasets import Dataset

    base = env.unwrapped
    examples = base.examples[:limit] if limit else base.examples
    return Dataset.from_list(
        [
            {
                "prompt": base.protocol.prompt(ex.question),
                "question": ex.question,
                "golden_answers": list(ex.golden_answers),
                "example_index": i,
            }
            for i, ex in enumerate(examples)
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
            llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
            if llm is None:
                raise ValueError(
                    "multi-turn search rollouts need token-level access to the engine: use vllm_mode='colocate' "
                    "(the 'server' mode's client only exchanges text)"
                )
            return VLLMGenerator(llm, tokenizer, sampling)
        return HFGenerator(trainer.accelerator.unwrap_model(trainer.model), tokenizer, sampling)

    def __call__(self, prompts: Sequence[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        texts = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
        missing = [t[:60] for t in texts if t not in self.index_of]
        if missing:
            raise ValueError(
                f"{len(missing)} prompt(s) are not questions of the environment's dataset (e.g. {missing[0]!r}…); "
                "build the train dataset with searchenv.adapters.trl.make_dataset(env) so prompts map to questions"
            )
        args = trainer.args
        response_cap = args.max_completion_length or 10**9
        sampling = SamplingConfig(
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=min(self.max_new_tokens, response_cap),
            max_total_tokens=10**9,
            max_response_tokens=response_cap,
            chat_template=self.chat_template,
        )
        envs = self._envs_for(len(texts))
        seed = args.seed * 1_000_003 + self.calls
        self.calls += 1
        results = rollout(
            envs, self._generator(trainer, sampling), sampling, indices=[self.index_of[t] for t in texts], seed=seed
        )
        return {
            "prompt_ids": [r.tokens.prompt_ids for r in results],
            "completion_ids": [r.tokens.response_ids for r in results],
            "logprobs": [r.tokens.logprobs for r in results],
            "env_mask": [r.tokens.loss_mask for r in results],
            "env_reward": [r.reward for r in results],
            "env_reward_parts": [r.reward_parts for r in results],
            "env_metrics": [r.metrics for r in results],
        }


def _log_means(log_metric: Callable[[str, float], None] | None, prefix: str, rows: Sequence[Mapping[str, float]]):
    if log_metric is None or not rows:
        return
    for key in sorted({k for row in rows for k in row}):
        values = [float(row[key]) for row in rows if key in row]
        log_metric(f"{prefix}{key}", sum(values) / len(values))


def env_reward(
    completions: Sequence[Any],
    env_reward: Sequence[float] | None = None,
    env_reward_parts: Sequence[Mapping[str, float]] | None = None,
    env_metrics: Sequence[Mapping[str, float]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **_: Any,
) -> list[float]:
    """TRL reward function returning the reward the environment computed (it knows what it retrieved).

    Also logs the reward parts (``reward/em``, ``reward/format_ok``, ...) and per-episode metrics
    (``episode/valid_searches``, ``episode/invalid_actions``, ...) as TRL metrics.
    """
    if env_reward is None:
        raise ValueError(
            "env_reward needs the 'env_reward' column that SearchRolloutFunc returns; pass "
            "rollout_func=SearchRolloutFunc(...) to GRPOTrainer, or use reward_from_spec(...) instead"
        )
    _log_means(log_metric, "reward/", env_reward_parts or [])
    _log_means(log_metric, "episode/", env_metrics or [])
    return [float(r) for r in env_reward]


def reward_from_spec(spec: Any = "em", protocol: str = "search-r1") -> Callable[..., list[float]]:
    """A TRL reward function from a reward spec, scoring the decoded completion text.

    It reads the ``golden_answers`` (and optional ``question``) dataset columns, rebuilds the rollout with
    :meth:`Rollout.from_text` and logs every reward part via ``log_metric``.
    """
    from searchenv.reward_specs import Rollout, load_reward

    reward = load_reward(spec)

    def score(
        completions: Sequence[Any],
        golden_answers: Sequence[Sequence[str]],
        question: Sequence[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float]:
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        questions = question or [""] * len(texts)
        results = [reward(Rollout.from_text(t, g, protocol, q)) for t, g, q in zip(texts, golden_answers, questions)]
        _log_means(log_metric, f"{reward.name}/", [r.parts for r in results])
        return [float(r.reward) for r in results]

    score.__name__ = f"searchenv_{reward.name}".replace("-", "_")
    return score


def make_grpo_trainer(
    model: Any,
    tokenizer: Any,
    args: GRPOConfig,
    env_kwargs: Mapping[str, Any] | None = None,
    max_new_tokens: int = 500,
    train_limit: int | None = None,
    reward_funcs: Sequence[Callable[..., list[float]]] | None = None,
) -> GRPOTrainer:
    """A ``GRPOTrainer`` wired to SearchQA: dataset from the environment, multi-turn ``rollout_func``, env reward.

    Args:
        model / tokenizer: a ``transformers`` causal LM and its tokenizer (the tokenizer needs a pad token).
        args: the ``GRPOConfig`` (``num_generations`` = group size, ``max_completion_length`` = response cap,
            ``beta`` = KL coefficient, ``learning_rate``, ...).
        env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments (dataset, retriever, reward, topk, max_turns...).
        max_new_tokens: per-turn generation cap.
        train_limit: use only the first ``train_limit`` questions.
        reward_funcs: replaces the default ``[env_reward]``.
    """
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOTrainer

    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rollout_func = SearchRolloutFunc(env_kwargs, max_new_tokens=max_new_tokens)
    return GRPOTrainer(
        model=model,
        reward_funcs=list(reward_funcs or [env_reward]),
        args=args,
        train_dataset=make_dataset(rollout_func.envs[0], limit=train_limit),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )

"""TRL's environment path over OpenEnv: ``GRPOTrainer(environment_factory=...)`` playing a SearchQA OpenEnv server.

This is how TRL trains on OpenEnv environments (its OpenEnv guide and ``grpo_*`` examples): each rollout gets an
object holding an OpenEnv client session; TRL calls its ``reset(**row)`` (the returned text is appended to the user
message), offers its public methods as tools (schemas from their signatures and docstrings), calls them when the
model emits a tool call, and — because the class defines ``get_reward`` — takes the episode's reward from the
environment once the rollout ends. Here the server is ``searchenv openenv-serve --protocol tool-call-answer-tool``
(or any URL serving SearchQA with that protocol): the model searches with ``search`` and answers with ``answer``,
and the reward is computed on the server, by the environment, from the episode it played. A rollout that ends
without an answer is truncated on the server (``SearchAction(end="trainer_cut")``) and scored like any truncated
episode, so every rollout carries the environment's reward.

Usage (the server already running on 127.0.0.1:8000)::

    factory = OpenEnvToolFactory("http://127.0.0.1:8000")
    trainer = GRPOTrainer(model, train_dataset=factory.dataset("train", limit=64), environment_factory=factory,
                          args=GRPOConfig(...))   # no reward_funcs: the environment owns the reward
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchenv.protocol.tools import ANSWER, SEARCH

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["OpenEnvSearchTools", "OpenEnvToolFactory"]


class OpenEnvSearchTools:
    """One rollout's environment for TRL: a WebSocket session with a SearchQA OpenEnv server.

    Its public methods ``search`` and ``answer`` are the tools TRL declares (their docstrings are the one tool
    vocabulary's); ``get_reward`` is the episode's reward as the server scored it.
    """

    def __init__(self, base_url: str, timeout_s: float = 120.0):
        from openenv.core import GenericEnvClient

        self._client = GenericEnvClient(base_url=base_url, message_timeout_s=timeout_s).sync()
        self._client.connect()
        self._reward: float | None = None
        self._done = True

    def reset(self, **row: Any) -> str:
        """Start the row's episode (``split`` and ``index``, as :meth:`OpenEnvToolFactory.dataset` writes them);
        returns the environment's prompt, which TRL appends to the user message."""
        result = self._client.reset(split=row.get("split"), index=int(row["index"]))
        self._reward, self._done = None, False
        return str(result.observation["text"])

    def _step(self, action: dict[str, Any]) -> str:
        if self._done:
            return "The episode has ended: no more tool calls are executed."
        result = self._client.step(action)
        self._done = bool(result.done)
        if self._done:
            self._reward = float(result.reward or 0.0)
        output = result.observation.get("tool_output")
        return str(output if output is not None else result.observation.get("text", ""))

    def search(self, query: str) -> str:
        return self._step({"tool": SEARCH.name, "arguments": {"query": query}})

    search.__doc__ = SEARCH.docstring(without=("k",))

    def answer(self, answer: str) -> str:
        result = self._step({"tool": ANSWER.name, "arguments": {"answer": answer}})
        return "Answer recorded." if self._done and not result else result

    answer.__doc__ = ANSWER.docstring()

    def get_reward(self) -> float:
        """The episode's reward; an episode the rollout left running is truncated on the server and scored."""
        if not self._done:
            self._step({"end": "trainer_cut"})
        return float(self._reward or 0.0)

    def _close(self) -> None:
        """Close the session (the server ends its episode). Private: TRL offers every public method as a tool."""
        self._client.close()


class OpenEnvToolFactory:
    """``environment_factory=`` for TRL's GRPOTrainer: each call opens a new session with the server at ``base_url``.

    The server must serve a protocol whose answer is a tool call (``--protocol tool-call-answer-tool``): TRL never
    shows an environment the model's final plain message, so only an ``answer`` call can reach the episode.
    """

    def __init__(self, base_url: str, timeout_s: float = 120.0):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        schema = httpx.get(f"{self.base_url}/schema", timeout=timeout_s).json()
        if "tool" not in schema.get("action", {}).get("properties", {}):
            raise ValueError(f"{self.base_url} does not serve SearchQA (its action schema has no 'tool' field)")
        probe = OpenEnvSearchTools(self.base_url, timeout_s)
        try:
            first = probe._client.reset(index=0)
        finally:
            probe._close()
        tools = {tool["function"]["name"] for tool in first.observation.get("tools", [])}
        if ANSWER.name not in tools:
            raise ValueError(
                f"the server at {self.base_url} offers tools {sorted(tools) or 'none'}; TRL's tool loop needs the "
                "answer tool: start it with `searchenv openenv-serve --protocol tool-call-answer-tool`"
            )

    def __call__(self) -> OpenEnvSearchTools:
        return OpenEnvSearchTools(self.base_url, self.timeout_s)

    def dataset(self, split: str, limit: int | None = None) -> Dataset:
        """One row per task of ``split`` (the server's Task API): an empty user prompt (``reset`` supplies the text),
        ``split`` and ``index``."""
        import httpx
        from datasets import Dataset

        count = httpx.post(f"{self.base_url}/searchqa/num_tasks", json={"split": split}, timeout=self.timeout_s)
        count.raise_for_status()
        total = int(count.json()["num_tasks"])
        rows = min(limit, total) if limit else total
        return Dataset.from_list(
            [{"prompt": [{"role": "user", "content": ""}], "split": split, "index": i} for i in range(rows)]
        )


def train(
    url: str,
    model: str = "smollm2-135m",
    split: str = "train",
    limit: int | None = 64,
    steps: int = 2,
    output_dir: str = "runs/trl-openenv",
    num_generations: int = 2,
    max_completion_length: int = 512,
) -> Any:
    """GRPO with TRL through the SearchQA OpenEnv server at ``url`` on the CPU (the documented smoke recipe);
    returns the trainer. ``model`` is a checkpoint folder or the packaged alias ``"smollm2-135m"``; its chat
    template is replaced by the Qwen2.5 one (ChatML with tools, which TRL's response parser reads)."""
    import trl
    from trl.chat_template_utils import qwen2_5_chat_template

    from searchenv.rollout import load_policy

    policy, tokenizer = load_policy(model)
    tokenizer.chat_template = qwen2_5_chat_template
    factory = OpenEnvToolFactory(url)
    trainer = trl.GRPOTrainer(
        model=policy,
        processing_class=tokenizer,
        environment_factory=factory,
        train_dataset=factory.dataset(split, limit=limit),
        args=trl.GRPOConfig(
            output_dir=output_dir,
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=num_generations,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            max_steps=steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
        ),
    )
    trainer.train()
    return trainer


def main(argv: list[str] | None = None) -> int:
    """``python -m searchenv.adapters.openenv.trl --url http://127.0.0.1:8000``: :func:`train` from the command line."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m searchenv.adapters.openenv.trl", description=train.__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the SearchQA OpenEnv server")
    parser.add_argument("--model", default="smollm2-135m", help="checkpoint folder or the packaged alias")
    parser.add_argument("--split", default="train", help="the split whose tasks are the training rows")
    parser.add_argument("--limit", type=int, default=64, help="the first N tasks of the split")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps")
    parser.add_argument("--num-generations", type=int, default=2, help="rollouts per question (the GRPO group)")
    parser.add_argument("--max-completion-length", type=int, default=512, help="tokens per rollout, tools included")
    parser.add_argument("--output-dir", default="runs/trl-openenv", help="TRL's output folder")
    args = parser.parse_args(argv)
    trainer = train(
        args.url,
        args.model,
        args.split,
        args.limit,
        args.steps,
        args.output_dir,
        args.num_generations,
        args.max_completion_length,
    )
    print({k: v for k, v in trainer.state.log_history[-2].items() if k.startswith(("reward", "tools/"))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The learning recipe's environment and warm-start settings, shared by ``searchenv train-sft`` (its defaults) and
``searchenv learn`` (every stage)."""

from __future__ import annotations

from typing import Any

__all__ = ["LEARN_ENV", "SFT_RECIPE"]

#: The environment of the learning recipe, shared by the warm start, reinforcement learning and evaluation:
#: the paper's instruction prompt as plain text (no chat template, no worked example: the demonstrations teach the
#: format), two passages of at most 35 words each (every hop's fact is shown for 96% of the world's train
#: questions under the demonstrator's searches), EM, and six actions (four hops, an answer, one spare).
LEARN_ENV: dict[str, Any] = {
    "dataset": "world",
    "split": "train",
    "retriever": "bm25",
    "reward": "em",
    "protocol": "search-r1",
    "topk": 2,
    "max_information_words": 70,
    "max_turns": 6,
    "chat_template": "off",
}
#: The warm start's own defaults (:class:`~searchenv.adapters.sft.trainer.SFTConfig` fields and sources); bf16
#: autocast takes about a third of a float32 step's time on a CPU with AMX units. Micro-batches of 2 (the same
#: gradient as one pass over 8): the activations the 16 trained layers keep for the backward pass grow with the
#: micro-batch: 8.5 GB for a run at 8, 6.0 GB at 2, of which the steps need 3.4 (docs/benchmarks.md).
#: Every hop count is demonstrated: a warm start shown only one- and two-hop questions searched a third time in 0 of
#: 320 episodes sampled at T = 1 on three- and four-hop train questions, so no reward could ever reach a third
#: search (docs/runs/two_hop_warm_start/).
SFT_RECIPE: dict[str, Any] = {
    "validation": 64,
    "steps": 40,
    "lr": 2e-4,
    "batch_size": 8,
    "micro_batch_size": 2,
    "trainable_layers": 16,
    "bf16": True,
}

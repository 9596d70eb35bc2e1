"""A randomly initialised one-layer Qwen2 for tests that drive a real trainer with scripted generations: the
architecture and tokenizer of the Qwen family, at a size that builds in milliseconds."""

from __future__ import annotations

from typing import Any


def tiny_qwen2(tokenizer: Any) -> Any:
    """A one-layer, 16-wide ``Qwen2ForCausalLM`` over the tokenizer's vocabulary, seeded: the same weights each call."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32768,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
    )
    return transformers.Qwen2ForCausalLM(config)

"""Small pieces for driving a ``transformers`` model's KV cache by hand: the keyword its forward takes, the cache a
forward returned, and a cache whose layers grow in place. Shared by the rollout engine (a cache kept between the
turns of an episode) and the PPO update (a prompt run once for a whole GRPO group)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_keyword", "growing_cache", "output_cache"]


def growing_cache(layers: list[tuple[Any, Any]]) -> Any:
    """A ``transformers`` cache whose layers start from ``layers`` (none: empty) and grow in place."""
    from transformers.cache_utils import Cache

    if not layers:
        return Cache(layer_class_to_replicate=_growing_layer())
    return Cache(layers=[_growing_layer()(k, v) for k, v in layers])


@functools.lru_cache(maxsize=1)
def _growing_layer() -> type:
    """``transformers``' dynamic cache layer, writing new keys and values into spare room instead of concatenating
    (a concatenation copies the whole cache at every decoding step); defined on first use, so that importing this
    module does not import ``transformers``."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, keys: Any = None, values: Any = None):
            super().__init__()
            self._room: tuple[Any, Any] | None = None
            self._length = 0
            if keys is not None:
                self.device, self.is_initialized = keys.device, True
                self._room, self._length = (keys, values), keys.shape[-2]
                self.keys, self.values = keys, values

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            self.device, self.is_initialized = key_states.device, True
            self._room = (key_states[..., :0, :], value_states[..., :0, :])

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            keys, values = self._room
            end = self._length + key_states.shape[-2]
            if end > keys.shape[-2]:  # double the room, at least 64 slots
                size = (*keys.shape[:-2], max(end, 2 * keys.shape[-2], 64), keys.shape[-1])
                grown = keys.new_empty(size), values.new_empty(size)
                grown[0][..., : self._length, :] = keys[..., : self._length, :]
                grown[1][..., : self._length, :] = values[..., : self._length, :]
                keys, values = self._room = grown
            keys[..., self._length : end, :] = key_states
            values[..., self._length : end, :] = value_states
            self._length = end
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]
            return self.keys, self.values

    return GrowingLayer


def cache_keyword(model: Any) -> str:
    """The KV-cache keyword of the model's forward: ``cache`` (transformers 5.x), ``past_key_values`` before."""
    return _cache_keyword_of(type(model).forward)


@functools.lru_cache(maxsize=8)
def _cache_keyword_of(forward: Any) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The KV cache a forward pass returned (``output.cache`` in transformers 5.x, ``past_key_values`` before)."""
    return output.cache if getattr(output, "cache", None) is not None else output.past_key_values

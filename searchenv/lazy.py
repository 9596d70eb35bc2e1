"""Values computed the first time they are read: :class:`LazyDict` and :class:`computed_once`.

The terminal step reports every reward part (EM, F1, cover-EM, the format verdict, the retrieval hit) and the
episode's metrics in ``info``, but most training steps never read most of them: the format grammar and the
passage scan would cost several times the step itself. :class:`LazyDict` keeps the whole contract — it *is* a
``dict`` (``isinstance`` checks, Gymnasium's vector ``info`` merging, ``json.dumps``, pickling, ``==``) with
its keys present from the start — and runs the computation once, at the first read of a value.

Its keys are known up front and stored with :data:`NOT_COMPUTED` placeholders, so code that only looks at the
size (the JSON encoder's empty-dict shortcut, ``len``, ``bool``) is right without computing anything. Every
Python-level way to read a value fills the dict first; pickling and copying give a plain, filled ``dict``.

A C extension that reads a dict's storage directly (orjson, pyarrow and so HF ``datasets``) bypasses all of that.
It meets the placeholder, an object no serialiser knows, and fails naming it — where a ``None`` placeholder
would have been written down silently as a missing reward. :func:`filled` gives plain dicts for such readers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, KeysView, Mapping
from functools import lru_cache
from typing import Any, Generic, TypeVar, overload

__all__ = ["NOT_COMPUTED", "LazyDict", "LazyKeys", "computed_once", "filled"]

T = TypeVar("T")


class computed_once(Generic[T]):  # noqa: N801 - used as a decorator, like functools.cached_property
    """``functools.cached_property`` without its per-access lock (Python 3.11 takes one on every first read).

    The value is stored in the instance ``__dict__`` under the same name, so later reads are plain attribute
    lookups. Two threads reading at once may both compute it; the function must be pure.
    """

    def __init__(self, function: Callable[[Any], T]):
        self.function = function
        self.name = function.__name__
        self.__doc__ = function.__doc__

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> computed_once[T]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> T | computed_once[T]:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.function(instance)
        return value


class NotComputedLazyValue:
    """The value a :class:`LazyDict` stores before it is filled; Python code never reads it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return (
            "<searchenv lazy value, not computed: this reader bypassed the dict's methods; "
            "pass searchenv.filled(info) (or dict(parts)) to C-level readers such as orjson or pyarrow>"
        )

    def __reduce__(self) -> str:
        return "NOT_COMPUTED"  # a singleton, pickled by name


NOT_COMPUTED = NotComputedLazyValue()


def filled(value: Any) -> Any:
    """``value`` with every :class:`LazyDict` inside it (dicts, lists, tuples) computed and made a plain ``dict``.

    For readers that bypass Python-level dict methods (orjson, pyarrow, HF ``datasets``); Python code, pickling
    and Gymnasium need nothing of the kind.
    """
    if isinstance(value, dict):
        return {key: filled(item) for key, item in value.items()}
    if isinstance(value, list):
        return [filled(item) for item in value]
    if isinstance(value, tuple):  # a step's 5-tuple (a NamedTuple) keeps its type
        items = [filled(item) for item in value]
        return type(value)._make(items) if hasattr(value, "_fields") else tuple(items)
    return value


class LazyKeys:
    """The key set of many :class:`LazyDict` values — a reward spec's parts, an episode's metrics — prepared once.

    Made by :meth:`of`, one object per distinct tuple of names, so that the dicts built at every terminal step
    copy a ready placeholder dict and derived key sets are found by identity, without hashing the names again.
    """

    __slots__ = ("names", "placeholders")

    def __init__(self, names: tuple[str, ...]):
        self.names = names  # in order
        self.placeholders = dict.fromkeys(names, NOT_COMPUTED)

    @staticmethod
    @lru_cache(maxsize=256)
    def of(names: tuple[str, ...]) -> LazyKeys:
        """The one key set of ``names`` (cached: specs and metrics have a handful of key sets)."""
        return LazyKeys(names)

    def __repr__(self) -> str:
        return f"LazyKeys{self.names!r}"


class LazyDict(dict):
    """``dict(keys → compute()[key])``, with ``compute`` run at the first read of a value: build one with
    :meth:`of`. Called like ``dict`` (``LazyDict(mapping)``), it is an ordinary dict with nothing to compute.

    Two threads reading for the first time at the same moment may both run ``compute``; it must be pure.
    """

    __slots__ = ("_compute", "key_set")
    _compute: Callable[[], Mapping[str, Any]] | None
    key_set: LazyKeys  # the keys as announced (set by :meth:`of`)

    # No Python-level __init__: dict's own builds the placeholders, which costs half as much at every terminal step.
    @classmethod
    def of(cls, keys: LazyKeys | tuple[str, ...], compute: Callable[[], Mapping[str, Any]]) -> LazyDict:
        """A dict with ``keys`` now and their values from ``compute()`` at the first read."""
        key_set = keys if type(keys) is LazyKeys else LazyKeys.of(keys)
        lazy = cls(key_set.placeholders)
        lazy._compute, lazy.key_set = compute, key_set
        return lazy

    @property
    def names(self) -> tuple[str, ...]:
        """The keys as announced, in order."""
        return self.key_set.names

    def _fill(self) -> None:
        compute = getattr(self, "_compute", None)
        if compute is None:
            return
        values = compute()
        if values.keys() != dict.keys(self):
            raise KeyError(f"lazy dict computed keys {sorted(values)} but announced {sorted(dict.keys(self))}")
        dict.update(self, values)  # values first, then the flag: a concurrent reader never sees a placeholder
        self._compute = None

    @property
    def computed(self) -> bool:
        """Whether the values have been computed (for tests and benchmarks; reading never needs it)."""
        return getattr(self, "_compute", None) is None

    def __iter__(self) -> Iterator[str]:
        # Yields keys only, so nothing to compute; but it must be a Python-level override: a dict subclass that
        # keeps dict's own iterator is copied by ``dict(...)``/``{**...}`` straight from its storage.
        return dict.__iter__(self)

    def keys(self) -> KeysView[str]:  # the keys are real from the start
        return dict.keys(self)

    def __getitem__(self, key: str) -> Any:
        # Written out rather than wrapped like the other readers: ``dict(lazy)`` and ``{**lazy}`` call it once per key.
        if getattr(self, "_compute", None) is not None:
            self._fill()
        return dict.__getitem__(self, key)

    def __reduce__(self) -> tuple[type, tuple[dict]]:
        self._fill()
        return (dict, (dict.copy(self),))


def _filling(name: str) -> Callable[..., Any]:
    method = getattr(dict, name)

    def read(self: LazyDict, *args: Any, **kwargs: Any) -> Any:
        self._fill()
        for other in args:  # dict's C comparison reads the other operand's storage directly
            if isinstance(other, LazyDict):
                other._fill()
        return method(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = method.__doc__
    return read


# Every other dict method that reads or changes a value goes through _fill first (size, membership and the keys
# need only the keys, which are real from the start).
for _name in (
    "__reversed__",
    "__eq__",
    "__ne__",
    "__repr__",
    "__or__",
    "__ror__",
    "__ior__",
    "__setitem__",
    "__delitem__",
    "get",
    "values",
    "items",
    "copy",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "clear",
):
    setattr(LazyDict, _name, _filling(_name))
del _name

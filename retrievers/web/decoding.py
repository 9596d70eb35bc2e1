"""A page body's content codings undone piece by piece, so a size cap holds while the body is being decoded.

An HTTP client that decodes a whole network chunk at once lets a compression bomb through: two gzip layers
(``Content-Encoding: gzip, gzip``) of a few hundred bytes inflate to gigabytes inside one ``decompress`` call,
before any cap on the decoded size is looked at. :class:`BoundedDecoder` reads the raw bytes instead and undoes
each layer with a bounded output (:data:`PIECE` bytes per call), handing each piece to the next layer at once; the
caller counts the decoded pieces as they come and stops at its cap, so memory stays at the cap plus one piece
per layer, whatever the stack of codings.

Only the codings it can bound are accepted — ``gzip`` (``x-gzip``), ``deflate`` and ``identity`` — and only those
are asked for (:data:`ACCEPT_ENCODING`); any other coding is a :class:`UnknownCoding`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["ACCEPT_ENCODING", "PIECE", "BoundedDecoder", "CorruptCoding", "UnknownCoding"]

#: The ``Accept-Encoding`` to send: the codings :class:`BoundedDecoder` undoes.
ACCEPT_ENCODING = "gzip, deflate"
#: Most bytes one layer produces per call.
PIECE = 64 * 1024


class UnknownCoding(ValueError):
    """A content coding the decoder cannot bound (``br``, ``zstd``, ``compress``, ...)."""


class CorruptCoding(ValueError):
    """A layer's bytes are not valid in its coding."""


class _ZlibLayer:
    """One gzip or deflate layer; ``deflate`` accepts the zlib-wrapped form and the raw one, as browsers do."""

    def __init__(self, name: str):
        self.name = name
        self._raw_fallback = name == "deflate"
        self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 16 if name != "deflate" else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data``, each at most :data:`PIECE` bytes, produced one at a time."""
        pending = data
        while True:
            if self._inflater.eof:  # bytes after the end of the stream are ignored, as HTTP clients do
                return
            try:
                out = self._inflater.decompress(pending, PIECE)
            except zlib.error as exc:
                if not self._raw_fallback:
                    raise CorruptCoding(f"the {self.name} layer is corrupt ({exc})") from None
                self._raw_fallback = False
                self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._raw_fallback = False
            pending = self._inflater.unconsumed_tail
            if out:
                yield out
            if not pending and len(out) < PIECE:
                return


class BoundedDecoder:
    """Undoes the codings of one ``Content-Encoding`` header value (listed in the order they were applied).

    Raises :class:`UnknownCoding` for a coding it cannot bound. :meth:`feed` yields the decoded pieces of each
    raw chunk as they are produced; the caller stops consuming when it has enough.
    """

    def __init__(self, content_encoding: str):
        names = [name.strip().lower() for name in content_encoding.split(",") if name.strip()]
        layers = []
        for name in reversed(names):  # the last coding applied is undone first
            if name == "identity":
                continue
            if name not in ("gzip", "x-gzip", "deflate"):
                raise UnknownCoding(f"content coding {name!r} is not one the page reader decodes ({ACCEPT_ENCODING})")
            layers.append(_ZlibLayer("gzip" if name == "x-gzip" else name))
        self.layers = layers

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded pieces of the next raw chunk of the body."""
        yield from self._through(0, raw)

    def _through(self, level: int, data: bytes) -> Iterator[bytes]:
        if level == len(self.layers):
            if data:
                yield data
            return
        for piece in self.layers[level].feed(data):
            yield from self._through(level + 1, piece)

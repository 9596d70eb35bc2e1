"""Retrievers that live behind HTTP: a retrieval server (:mod:`.remote`, Search-R1's ``/retrieve`` API) and its
wire format (:mod:`.wire`). They retry through searchenv's one retry policy, :mod:`searchenv.http.retry` (its
old home here, ``searchenv.retrievers.http.retry``, is a deprecated alias)."""

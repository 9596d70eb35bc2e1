"""The remote retriever: the client of a retrieval service (:mod:`.retriever`, :class:`RemoteRetriever` for
``http(s)://`` URLs: ``searchenv serve`` or Search-R1's own ``/retrieve`` server) and the wire format it shares
with ``searchenv serve`` (:mod:`.wire`). It retries through searchenv's one retry policy,
:mod:`searchenv.http.retry`, and builds its clients with :mod:`searchenv.http.clients`."""

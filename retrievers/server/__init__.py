"""``searchenv serve``: any retriever behind Search-R1's ``POST /retrieve`` API — the HTTP app (:mod:`.app`),
request batching and caching (:mod:`.batching`), processes and workers (:mod:`.run`), Ray Serve scale-out
(:mod:`.ray_serve`) and the command line (:mod:`.command`; also ``python -m searchenv.retrievers.server``)."""

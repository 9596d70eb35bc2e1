"""``searchenv serve``: any retriever behind Search-R1's ``POST /retrieve`` API — the HTTP app (:mod:`.app`),
the answer cache (:mod:`.answer_cache`; concurrent requests are merged by :mod:`searchenv.retrievers.batching`),
processes and workers (:mod:`.run`) and Ray Serve scale-out (:mod:`.ray_serve`). The command line is
:mod:`searchenv.cli.serve` (also ``python -m searchenv.retrievers.server``)."""

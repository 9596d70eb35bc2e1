"""Retrievers that live behind HTTP: a retrieval server (:mod:`.remote`, Search-R1's ``/retrieve`` API) and web
search (:mod:`.web_search`), with one retry policy (:mod:`.retry`)."""

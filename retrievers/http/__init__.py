"""Retrievers that live behind HTTP: a retrieval server (:mod:`.remote`, Search-R1's ``/retrieve`` API), with
one retry policy (:mod:`.retry`) that the web search backends (:mod:`searchenv.retrievers.web`) share."""

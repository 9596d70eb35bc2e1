"""Degraded search engines: wrappers that make any engine's results worse in one controlled way.

The search-engine study finds that what the agent learns depends on what the engine returns; these wrappers
turn that into one argument. Each wraps a *base* engine (``retriever_options={"base": "bm25", "base_options":
{...}}``) and degrades its results per query:

* ``noisy`` — each passage is replaced, with probability ``p``, by a random corpus passage the base did not return;
* ``empty`` — with probability ``p`` (default 1) the query gets no passages at all;
* ``shuffled`` — with probability ``p`` (default 1) the base's passages come back in another order;
* ``distractor`` — with probability ``p`` (default 1) the passages holding one of the episode's gold answers are
  dropped and the next best ones take their place.

``p`` may follow a schedule over training steps (:mod:`searchenv.retrievers.degraded.schedule`). The classes live
in :mod:`searchenv.retrievers.degraded.wrappers`; this package imports nothing on its own, so that checking the
options (:mod:`searchenv.retrievers`) never loads an engine.
"""

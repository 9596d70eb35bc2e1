"""A simulated search engine (``retriever="simulated"``): a model writes the documents a search returns.

ZeroSearch's idea as one argument: instead of searching a corpus, a model (an OpenAI-compatible endpoint, or a
local checkpoint) writes ``k`` documents for each query, each either *useful* (it helps answer the query) or
*noisy* (plausible, unhelpful) with probability ``p_noisy``, which may follow a schedule over training steps.
The engine lives in :mod:`searchenv.retrievers.simulated.engine`, the prompts in
:mod:`~searchenv.retrievers.simulated.prompts`, the option check in :mod:`~searchenv.retrievers.simulated.options`;
this package imports nothing on its own.
"""

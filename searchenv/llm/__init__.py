"""Asking a language model, for the parts of searchenv that consult one: the LLM judge (a reward and an
evaluation metric), the simulated search engine, the page summariser and ``searchenv eval``'s endpoint policy.

It sits below rewards and retrievers (it imports neither), above :mod:`searchenv.http` (the one client setup and
retry policy), :mod:`searchenv.answer_store` (the record/replay store) and :mod:`searchenv.sampling` (a request's
decoding settings, :class:`~searchenv.sampling.SamplingConfig`; greedy unless asked otherwise):

- :mod:`.client`: :class:`~searchenv.llm.client.EndpointClient`, an OpenAI-compatible endpoint (chat and
  completions), one pooled async client per event loop, every request retried by :mod:`searchenv.http.retry`;
- :mod:`.local`: a local ``transformers`` checkpoint answering short prompts through the rollout engine;
- :mod:`.prompter`: :class:`~searchenv.llm.prompter.Prompter`, short prompts to either, each prompt's failure
  its own (:class:`~searchenv.llm.prompter.PromptFailure`), answers through an optional answer store, with an
  async :meth:`~searchenv.llm.prompter.Prompter.aask` that never blocks the event loop;
- :mod:`.blocking`: running such a coroutine from synchronous code.

Nothing here imports httpx or torch until a request is made.
"""

"""What every HTTP client of searchenv shares, below the retrievers and the LLM client: the one retry policy
(:mod:`.retry`, the only reader of ``Retry-After``), the one client setup (:mod:`.clients`: timeouts, pools,
headers, one pooled async client per event loop) and the one client-side rate limiter (:mod:`.pacing`).
Nothing here imports httpx until a client is built."""

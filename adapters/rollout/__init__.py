"""The multi-turn generation loop every trainer adapter shares: token-in/token-out rollouts of SearchQA
episodes with a causal LM (:mod:`.generation`)."""

"""Trainer glue: thin layers from SearchQA-v0 to SkyRL-gym, TRL, veRL and a plain PPO/GRPO loop."""

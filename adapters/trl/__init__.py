"""TRL glue: ``GRPOTrainer`` through its ``rollout_func`` (:mod:`.grpo`), native tool calls through
``environment_factory`` (:mod:`.tools`), and the command line (:mod:`.train`, ``searchenv train-trl``)."""

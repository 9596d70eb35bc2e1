"""The built-in trainer: PPO, GRPO and REINFORCE++ in one readable loop (:mod:`.trainer`) and its command line
(:mod:`.train`, ``searchenv train-ppo``)."""

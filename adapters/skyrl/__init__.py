"""SkyRL glue: SearchQA as a ``skyrl_gym`` environment (:mod:`.env`) and the trainer entry point with its
config (:mod:`.train`)."""

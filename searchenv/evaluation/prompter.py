"""Moved to :mod:`searchenv.llm` (the LLM-endpoint package below rewards and retrievers): ``Prompter``,
``PromptFailure`` and ``check_model_source`` to :mod:`searchenv.llm.prompter`, ``run_coroutine`` to
:mod:`searchenv.llm.blocking`. The old names keep working here with a ``DeprecationWarning``."""

from searchenv.imports import moved

__getattr__ = moved(
    __name__,
    {
        "Prompter": "searchenv.llm.prompter:Prompter",
        "PromptFailure": "searchenv.llm.prompter:PromptFailure",
        "check_model_source": "searchenv.llm.prompter:check_model_source",
        "run_coroutine": "searchenv.llm.blocking:run_coroutine",
    },
)

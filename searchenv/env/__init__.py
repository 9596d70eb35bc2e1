"""``SearchQA-v0`` itself: the environment (:mod:`.search_qa`), the rules of a step (:mod:`.step_rules`), batch
stepping (:mod:`.stepping`), the vector environment (:mod:`.vector`) and the free-text space (:mod:`.spaces`)."""

from searchenv.env.merged_search import SearchMerger
from searchenv.env.search_qa import SearchQAEnv
from searchenv.env.step_rules import StepResult
from searchenv.env.stepping import step_batch, step_batch_async
from searchenv.env.vector import SearchQAVectorEnv

__all__ = ["SearchMerger", "SearchQAEnv", "SearchQAVectorEnv", "StepResult", "step_batch", "step_batch_async"]

"""Evaluation: policies (local model, vLLM, OpenAI-compatible endpoint), the Direct / RAG baselines, checkpoint
replay, the resumable ``searchenv eval`` runner, the papers' report tables, the mixed evaluation set and the HTML
transcript viewer. Nothing heavy is imported here.
"""

from searchenv.evaluation.checkpoint import RUN_FILE, read_run_settings
from searchenv.evaluation.evalset import EVAL_DATASETS, build_eval_set, write_eval_set
from searchenv.evaluation.policies import Context, EndpointPolicy, Generation, LocalPolicy, Policy
from searchenv.imports import moved
from searchenv.llm.sampling import SamplingSettings

__all__ = [
    "EVAL_DATASETS",
    "RUN_FILE",
    "Context",
    "EndpointPolicy",
    "SamplingSettings",
    "Generation",
    "LocalPolicy",
    "Policy",
    "build_eval_set",
    "read_run_settings",
    "write_eval_set",
]

#: ``EvalSampling`` is :class:`searchenv.llm.sampling.SamplingSettings` now (deprecated alias).
__getattr__ = moved(__name__, {"EvalSampling": "searchenv.llm.sampling:SamplingSettings"})

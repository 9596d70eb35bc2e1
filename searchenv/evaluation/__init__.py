"""Evaluation: policies (local model, vLLM, OpenAI-compatible endpoint), the Direct / RAG baselines, checkpoint
replay, the resumable ``searchenv eval`` runner, the papers' report tables, the mixed evaluation set and the HTML
transcript viewer. Nothing heavy is imported here.
"""

from searchenv.evaluation.checkpoint import RUN_FILE, read_run_settings
from searchenv.evaluation.evalset import EVAL_DATASETS, build_eval_set, write_eval_set
from searchenv.evaluation.policies import Context, EndpointPolicy, LocalPolicy, Policy

__all__ = [
    "EVAL_DATASETS",
    "RUN_FILE",
    "Context",
    "EndpointPolicy",
    "LocalPolicy",
    "Policy",
    "build_eval_set",
    "read_run_settings",
    "write_eval_set",
]

"""Judging an answer with a model: the prompt (R1-Searcher's ACC_L by default), reading the verdict, and
:class:`Judge`, which asks an endpoint or a local model. The ``judge`` reward formula
(:class:`searchenv.reward_specs.formulas.JudgeReward`) and the evaluation's ACC_L metric
(:mod:`searchenv.evaluation.judged_accuracy`) both judge through here, so they cannot disagree.
"""

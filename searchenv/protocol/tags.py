"""The papers' tag protocols: Search-R1 (and its few-shot variant for tiny models), R1-Searcher, R-Search, and
ASearcher's, whose agent also opens a result whole with ``<access>``."""

from __future__ import annotations

from searchenv.protocol.base import Protocol

__all__ = ["TAG_PROTOCOLS"]

# One worked example instead of instructions: tiny instruct models (SmolLM2-135M) never wrote a tag in 16
# samples from the instruction above, but copy the example's shape; short, since prompt tokens dominate CPU time.
# The example is laid out exactly as the environment writes an episode (Search-R1's block layout), so the turns
# of a real episode read token for token like the example (tests/test_tokenization.py holds them together).
_SEARCH_R1_FEWSHOT_PROMPT = (
    "Answer the question. Think inside <think> </think>, search with <search> query </search> (results come "
    "back inside <information> </information>) and give the final answer inside <answer> </answer>.\n\n"
    "Question: Who founded Orvane Abbey?\n<think> I do not know, I should search. </think>\n"
    "<search> Orvane Abbey founder </search>\n\n<information>Doc 1(Title: Orvane Abbey) Orvane Abbey was founded "
    "by Tesk Mallor in 1210.</information>\n\n<think> The passage says Tesk Mallor. </think>\n"
    "<answer> Tesk Mallor </answer>\n\nQuestion: {question}\n"
)

_R1_SEARCHER_PROMPT = (
    "Answer the question below. Reason step by step inside <think> and </think>. When you need facts you do "
    "not have, write a query as <|begin_of_query|> your query <|end_of_query|>; the retrieved documents "
    "will be returned between <|begin_of_documents|> and <|end_of_documents|>. You may query several "
    "times. Give the final answer inside <answer> and </answer> without explanation. Question: {question}\n"
)

_R_SEARCH_PROMPT = (
    "Answer the question below. When you need facts you do not have, write <search> your query </search>; "
    "the results will be returned between <observation> and </observation>. You may search several times. "
    "Before answering, write the evidence you rely on, distilled from all observations, inside "
    "<original_evidence> and </original_evidence>, then give only the final answer inside <answer> and "
    "</answer>. Question: {question}\n"
)

# ASearcher's tags (agent/asearcher.py): <search>, <access> and <answer>; search results and opened pages both come
# back in an <information> block. The wording is ours; <access> takes the number of a result of the latest search
# (or its URL / id).
_ASEARCHER_PROMPT = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. To search, write <search> your query </search>; the results come back numbered between "
    "<information> and </information>. To read one result whole, write <access> its number </access> (a URL or "
    "id it showed also works); the document comes back between <information> and </information>. You may "
    "search and read as many times as you need. Once you know enough, give only the final answer inside <answer> "
    "and </answer>, for example <answer> Paris </answer>. Question: {question}\n"
)


TAG_PROTOCOLS: dict[str, Protocol] = {
    "search-r1": Protocol(name="search-r1"),
    "search-r1-fewshot": Protocol(name="search-r1-fewshot", prompt_template=_SEARCH_R1_FEWSHOT_PROMPT),
    "r1-searcher": Protocol(
        name="r1-searcher",
        search_tags=("<|begin_of_query|>", "<|end_of_query|>"),
        information_tags=("<|begin_of_documents|>", "<|end_of_documents|>"),
        prompt_template=_R1_SEARCHER_PROMPT,
        invalid_hint=(
            "\nMy previous action is invalid. To search, I should put the query between <|begin_of_query|> "
            "and <|end_of_query|>. To answer, I should put the answer between <answer> and </answer>.\n"
        ),
    ),
    "r-search": Protocol(
        name="r-search",
        information_tags=("<observation>", "</observation>"),
        think_tags=None,
        evidence_tags=("<original_evidence>", "</original_evidence>"),
        prompt_template=_R_SEARCH_PROMPT,
        invalid_hint=(
            "\nMy previous action is invalid. To search, I should put the query between <search> and "
            "</search>. To answer, I should write my evidence in <original_evidence> and </original_evidence> "
            "and then the answer between <answer> and </answer>.\n"
        ),
    ),
    "asearcher": Protocol(
        name="asearcher",
        open_tags=("<access>", "</access>"),
        prompt_template=_ASEARCHER_PROMPT,
        invalid_hint=(
            "\nMy previous action is invalid. To search, I should put the query between <search> and </search>. "
            "To read a result, I should put its number between <access> and </access>. To give the final answer, "
            "I should put it between <answer> and </answer>. Let me try again.\n"
        ),
    ),
}

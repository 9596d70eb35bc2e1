"""Evidence answerers for R-Search's evidence reward: ``(question, evidence) -> answer``.

R-Search asks a frozen model of another family to answer the question from the policy's evidence alone and
rewards the F1 of that answer, so that the evidence has to carry the answer. Any callable with that
signature works; two are built in:

* :func:`lexical_overlap` — a deterministic, gold-blind extractive baseline for tests and CPU runs. It is a
  stand-in, not the paper's judge: it only shows whether the evidence contains a sentence that restates
  the question with an answer in it.
* :class:`HFAnswerer` — a local Hugging Face causal LM (safetensors directory or a GGUF file), greedy
  decoding, loaded once. This is the faithful setting (the paper uses Llama-3.2-3B-Instruct).
"""

from __future__ import annotations

import re
from typing import Any

from searchenv.reward_specs.metrics import normalize_answer

__all__ = ["HFAnswerer", "lexical_overlap"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Words that carry no answer; dropped from the chosen sentence along with the question's own words.
# fmt: off
_FUNCTION_WORDS = frozenset({
    "is", "was", "are", "were", "be", "been", "of", "in", "on", "at", "to", "and", "or", "by", "for", "with",
    "as", "from", "that", "this", "it", "its", "which", "who", "whom",
})
# fmt: on

_PROMPT = (
    "Use only the evidence below to answer the question. Reply with the answer alone, in a few words.\n"
    "Evidence: {evidence}\nQuestion: {question}"
)


def lexical_overlap(question: str, evidence: str) -> str:
    """Pick the evidence sentence sharing most words with the question and return its other content words.

    ``"Paris is the capital of France."`` answers ``"What is the capital of France?"`` with ``"Paris"``.
    Ties go to the earlier sentence; an empty evidence gives ``""``.
    """
    sentences = [s for s in _SENTENCE_END.split(evidence or "") if s.strip()]
    if not sentences:
        return ""
    asked = set(normalize_answer(question).split())

    def overlap(sentence: str) -> int:
        return len(asked & set(normalize_answer(sentence).split()))

    best = max(sentences, key=overlap)  # max keeps the first of equal scores
    words = [w for w in best.split() if (n := normalize_answer(w)) and n not in asked and n not in _FUNCTION_WORDS]
    return " ".join(words) if words else best.strip()


class HFAnswerer:
    """A frozen local causal LM that answers from evidence alone (greedy, so deterministic).

    Args:
        model: a local model directory (or a directory holding ``gguf_file``). The hub is never contacted.
        gguf_file: file name of a GGUF checkpoint inside ``model`` (transformers de-quantises it on load).
        max_new_tokens: answer length cap; answers are short by instruction.
        device: torch device string.
        prompt: template with ``{question}`` and ``{evidence}``; sent through the chat template when the
            tokenizer has one.
    """

    def __init__(
        self,
        model: str,
        *,
        gguf_file: str | None = None,
        max_new_tokens: int = 24,
        device: str = "cpu",
        prompt: str = _PROMPT,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if "{question}" not in prompt or "{evidence}" not in prompt:
            raise ValueError("HFAnswerer prompt must contain '{question}' and '{evidence}'")
        kwargs: dict[str, Any] = {"local_files_only": True}
        if gguf_file:
            kwargs["gguf_file"] = gguf_file
        self.tokenizer = AutoTokenizer.from_pretrained(model, **kwargs)
        self.model = AutoModelForCausalLM.from_pretrained(model, **kwargs).to(device).eval()
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.prompt = prompt

    def _encode(self, question: str, evidence: str) -> Any:
        text = self.prompt.format(question=question, evidence=evidence)
        if self.tokenizer.chat_template:
            encoded = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
        else:
            encoded = self.tokenizer(text + "\nAnswer:", return_tensors="pt")
        return {k: v.to(self.device) for k, v in encoded.items()}

    def __call__(self, question: str, evidence: str) -> str:
        import torch

        inputs = self._encode(question, evidence)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.inference_mode():
            output = self.model.generate(
                **inputs, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=pad_id
            )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        answer = self.tokenizer.decode(new_tokens, skip_special_tokens=True).strip()
        return answer.splitlines()[0].strip() if answer else ""

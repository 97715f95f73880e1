"""The token budget of a deployment: the corpus embedded once, then what each question costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragvps.errors import UsageError


@dataclass(frozen=True)
class Budget:
    """Tokens a RAG deployment spends: the corpus embedded once, then three costs per question."""

    corpus_chunks: int
    tokens_per_chunk: int
    questions: int
    question_tokens: int = 20  # what the query embedding reads
    chunks_per_answer: int = 8
    prompt_tokens: int = 100  # prompt template plus the question, sent with the chunks
    answer_tokens: int = 400

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 0:
                raise UsageError(f"{name} {value} must be zero or more", settings=(name,))
        if self.questions < 1:
            raise UsageError(f"questions {self.questions} must be at least 1", settings=("questions",))

    @property
    def corpus_embed_tokens(self) -> int:
        return self.corpus_chunks * self.tokens_per_chunk

    @property
    def generation_input_per_question(self) -> int:
        return self.chunks_per_answer * self.tokens_per_chunk + self.prompt_tokens

    def totals(self) -> dict[str, int]:
        """Tokens over all the questions, by kind."""
        return {
            "embedding": self.questions * self.question_tokens,
            "generation_input": self.questions * self.generation_input_per_question,
            "generation_output": self.questions * self.answer_tokens,
        }

    def amortised(self, questions: int | None = None) -> float:
        """Corpus embedding tokens per question, spread over `questions` (default: the planned count)."""
        return self.corpus_embed_tokens / (questions or self.questions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": dict(vars(self)),
            "corpus_embed_tokens": self.corpus_embed_tokens,
            "per_question": {
                "embedding": self.question_tokens,
                "generation_input": self.generation_input_per_question,
                "generation_output": self.answer_tokens,
            },
            "totals": self.totals(),
            "amortised_embedding_per_question": {
                str(q): self.amortised(q) for q in (self.questions, 10 * self.questions)
            },
        }

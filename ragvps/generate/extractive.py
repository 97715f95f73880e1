"""The default answer with no generator configured: the sentences of the retrieved chunks that best match
the question, quoted with their citations and scored with the local embedding model. No LLM, no network."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ragvps.generate.llm.base import Generation, Usage

if TYPE_CHECKING:
    from ragvps.embed import Embedder
    from ragvps.generate.budget import Fit

LABEL = "Extractive answer (sentences quoted from the sources; no language model was used):"
MAX_SENTENCES = 3
MAX_CANDIDATES = 200  # sentences embedded per question at most, which bounds the cost on a CPU
MIN_WORDS = 4
_NUMBER_MARKER = re.compile(r"\[(\s*\d[\d,\s]*)\]")
_HEADING_LINE = re.compile(r"^[ \t]*#{1,6}[ \t].*$", re.MULTILINE)  # Markdown headings: the heading path has them
_LIST_MARK = re.compile(r"^(?:[-*+>]|\d{1,3}[.)])\s+")


class Extractive:
    name = "extractive"
    extractive = True
    version = "2"  # part of the answer cache key: bump when the choice of sentences changes

    def __init__(self, embedder: Callable[[], Embedder], model: str, sentences: int = MAX_SENTENCES):
        self.embedder = embedder
        self.model = model
        self.sentences = sentences

    def generate(self, fit: Fit, on_token: Callable[[str], None]) -> Generation:
        from ragvps.embed import embed_documents, embed_queries

        picked = candidates(fit)
        if not picked:
            return Generation("", Usage(), "stop")
        embedder = self.embedder()
        question = embed_queries(embedder, [fit.prompt.question])[0]
        vectors = embed_documents(embedder, [text for _, text in picked])
        scores = vectors @ question
        best = np.argsort(-scores, kind="stable")[: self.sentences].tolist()  # best first; ties in rank order
        lines = [LABEL] + [f'- "{picked[i][1]}" [{picked[i][0]}]' for i in best]
        text = ""
        for i, line in enumerate(lines):
            piece = line if i == 0 else "\n" + line
            text += piece
            on_token(piece)
        return Generation(text, Usage(), "stop")


def candidates(fit: Fit) -> list[tuple[int, str]]:
    """(source number, sentence) for every sentence worth quoting, in source order, without duplicates."""
    from ragvps.text import sentences

    seen: set[str] = set()
    found: list[tuple[int, str]] = []
    for source in fit.prompt.sources:
        text = _HEADING_LINE.sub("", source.text)
        for a, b in sentences(text, 0, len(text)):
            sentence = _LIST_MARK.sub("", " ".join(text[a:b].split()))
            # a quoted "[3]" would read as a citation: keep the sentence's own numbers in parentheses
            sentence = _NUMBER_MARKER.sub(r"(\1)", sentence)
            if len(sentence.split()) < MIN_WORDS or sentence.casefold() in seen:
                continue
            seen.add(sentence.casefold())
            found.append((source.number, sentence))
            if len(found) >= MAX_CANDIDATES:
                return found
    if not found:  # only short fragments: quote them rather than nothing
        found = [(s.number, " ".join(s.text.split())[:300]) for s in fit.prompt.sources if s.text.strip()]
    return found

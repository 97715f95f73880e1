"""Citations: the model's `[n]` markers mapped to the sources sent; invented numbers dropped and counted."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ragvps.generate.prompt import REFUSAL, Source
from ragvps.generate.records import Citation

# [1], [1, 3], [1][2] (the last is two markers); numbers are 1-based, as the prompt numbers the sources.
_MARKER = re.compile(r"\[(\s*\d{1,4}(?:\s*,\s*\d{1,4})*\s*)\]")


@dataclass(frozen=True)
class Parsed:
    text: str  # the answer with invalid markers removed
    citations: list[Citation]  # each valid number once, in order of first use
    invalid: int  # markers citing a number no source has
    answered: bool  # False when the answer is the refusal sentence


def parse(answer: str, sources: Sequence[Source], quoted: bool = False) -> Parsed:
    """The answer's valid citations. A model's reply holding the refusal sentence is the refusal alone: no
    citations, none of what it copied around it (a small model often adds the sources' text). A `quoted`
    (extractive) answer is the refusal only when it is nothing else: a quoted document may hold the sentence."""
    if is_refusal(answer) and (not quoted or _normal(answer) == _normal(REFUSAL)):
        return Parsed(REFUSAL, [], 0, False)
    by_number = {s.number: s for s in sources}
    cited: dict[int, Citation] = {}
    invalid = 0

    def keep(match: re.Match[str]) -> str:
        nonlocal invalid
        numbers = [int(n) for n in match.group(1).split(",")]
        good = [n for n in numbers if n in by_number]
        invalid += len(numbers) - len(good)
        for n in good:
            if n not in cited:
                cited[n] = Citation(source=by_number[n])
        return f"[{', '.join(map(str, good))}]" if good else ""

    text = _MARKER.sub(keep, answer)
    if invalid:
        text = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", text))
    return Parsed(text.strip(), list(cited.values()), invalid, bool(text.strip()))


def _normal(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).replace("\u2019", "'").split()).casefold()


def is_refusal(answer: str) -> bool:
    """The answer carries the prompt's exact refusal sentence (quotes and spacing aside)."""
    return _normal(REFUSAL) in _normal(answer)

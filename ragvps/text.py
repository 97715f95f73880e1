"""Text rules every stage may use: sentence spans in plain text."""

from __future__ import annotations

import re


def strip_span(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+|[。！？]+[”’」』]*\s*")
_ABBREV = frozenset(re.findall(r"\S+", (
    "mr mrs ms dr prof sr jr st vs etc eg ie al fig figs eq eqs no nos vol ref refs approx ca cf inc ltd "
    "co corp dept univ gen col lt sgt jan feb mar apr jun jul aug sep sept oct nov dec resp pp ed eds"
)))
_WORD_BEFORE = re.compile(r"([\w.]+)$")


def sentences(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """Sentence spans in text[a:b]: after . ! ? and their CJK forms, but not after abbreviations or
    initials, nor before a lower-case word."""
    spans = []
    start = a
    for m in _END.finditer(text, a, b):
        cut = m.end()
        if cut >= b:
            break
        mark = m.group()
        if mark[0] == "." and not mark.startswith(".."):
            before = _WORD_BEFORE.search(text, max(start, m.start() - 24), m.start())
            word = before.group(1).lower() if before else ""
            if word in _ABBREV or "." in word or (len(word) == 1 and word.isalpha()) or text[cut].islower():
                continue
        elif mark[0] in "!?…" and text[cut].islower():
            continue
        spans.append(strip_span(text, start, cut))
        start = cut
    spans.append(strip_span(text, start, b))
    return [s for s in spans if s[0] < s[1]]

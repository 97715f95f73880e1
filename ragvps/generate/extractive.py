"""The default answer with no generator configured: the sentences of the sent chunks that answer the
question, quoted with their citations and their exact spans in the source document. No LLM, no network.

Candidates are prose sentences (ragvps.text.quotable: not code fences, table rows, headings or list
markers); a shell command is a candidate, whole, only when the question asks how to run something, or (its
line alone) when it names the action asked for ("how do I revoke a key?": `ragvps key revoke`). Each is
scored by the local embedding model's query-sentence cosine and the share of the question's words it
contains; one naming the action asked for (in a command or `code`) goes before the others; those under the
floor are dropped (no padding), near-duplicates too, best first. When none is
left the answer is the refusal sentence: the sentence-level check after the evidence gate.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ragvps.backends import LOCAL_MODEL
from ragvps.embed import embed_documents, embed_queries
from ragvps.embed.models import model_spec
from ragvps.generate.llm.base import Generation
from ragvps.generate.llm.tools import Unsupported, needs_llm, passed
from ragvps.generate.prompt import REFUSAL
from ragvps.generate.records import Quote, Usage
from ragvps.text import introduced, quotable
from ragvps.text import named_rows as text_rows

if TYPE_CHECKING:
    from ragvps.embed import Embedder
    from ragvps.generate.budget import Fit
    from ragvps.generate.prompt import Source

LABEL = "Extractive answer (sentences quoted from the sources; no language model was used):"
MAX_QUOTES = 1  # a cap, not a target: only a sentence above the floor is quoted (bench/answer_quality.py chose 1)
MAX_CANDIDATES = 200  # sentences embedded per question at most, which bounds the cost on a CPU
MIN_WORDS = 4
MAX_QUOTE_CHARS = 600
# A sentence's own score is COSINE_WEIGHT * its cosine to the question + the rest * its share of the question's
# words; its score is EVIDENCE_WEIGHT * its chunk's evidence (retrieve/evidence.py) + the rest * its own: the
# sentence and the chunk around it must both match (of two equally good sentences, the one in the chunk that
# matches the question is quoted). Chosen with bench/answer_quality.py on the calibration half of its
# questions (bench/RESULTS.md).
COSINE_WEIGHT = 0.6
EVIDENCE_WEIGHT = 0.5
FLOOR = 0.38  # a sentence scoring less does not answer the question
RELATIVE = 0.90  # ... nor one scoring less than this share of the best sentence's score
DUPLICATE = 0.8  # word-set Jaccard at which a sentence repeats one already quoted
_NUMBER_MARKER = re.compile(r"\[(\s*\d[\d,\s]*)\]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    re.findall(
        r"\S+",
        (
            "a an the and or but if of to in on at by for with from as is are was were be been being do does did done "
            "i you we they he she it this that these those my your our their its what which who whom whose when where "
            "why how can could should would will shall may might must not no so than then there here about into over "
            "me us them any all each some such more most other only own same too very just also get got have has had "
            "one ones use used using"
        ),
    )
)
# "how do I revoke ...": the action asked for, which a command (or a sentence's `code`) may name
_ACTION = re.compile(r"\bhow\s+(?:do|can|should|would|to)\s+(?:i|we|you|one)?\s*([a-z]{3,})\b", re.I)
_CODE = re.compile(r"`([^`]+)`")
_ARGUMENT_TEXT = re.compile(r"\"[^\"]*\"|'[^']*'|#[^\n]*")
_HOW_TO_RUN = re.compile(
    r"\b(?:how\s+(?:do|can|should|would|to)\s+(?:i|we|you|one)?\s*(?:run|start|launch|execute|invoke|install|"
    r"call|type|set\s+up|stop)|(?:which|what)\s+commands?|command\s+(?:to|for|line)|commands?\s+that)\b",
    re.I,
)


@dataclass(frozen=True)
class Candidate:
    source: Source
    a: int  # offsets in the chunk's text
    b: int
    text: str  # as quoted: whitespace collapsed, list markers cut
    command: bool = False
    row: bool = False  # a table row the question names by its first cell ("what does GET /health return?")


class Extractive:
    name = "extractive"
    extractive = True
    version = "8"  # part of the answer cache key: bump when the choice of sentences or their shape changes

    def __init__(self, embedder: Callable[[], Embedder], model: str, quotes: int = MAX_QUOTES):
        self.embedder = embedder
        self.model = model
        self.quotes = quotes
        # (from, to): a model's sentence cosines mapped onto MiniLM's range, the scale the weights and FLOOR were
        # chosen on, where its spec says so
        self._cosines: tuple[tuple[float, float], tuple[float, float]] | None = None
        spec, minilm = model_spec(model), model_spec(LOCAL_MODEL)
        if spec is not None and minilm is not None and spec.map_quote_cosines:
            self._cosines = (spec.cosine_range, minilm.cosine_range)
        # Sentences are embedded a core's worth at a time: 64 answers at once each embedding 200 sentences held
        # the model's buffers for all of them (a server grew 760 MB, and kept it); more at once is no faster.
        self._embedding = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))

    def unsupported(self, tools: str) -> Unsupported | None:
        """A request that requires a tool call or JSON, which only a language model gives; offered tools are a
        hint, ignored."""
        # lazy: a backend loads only when the settings choose it
        field = needs_llm(passed(tools))
        if field is None:
            return None
        return Unsupported(
            field,
            f"{field} asks for what only a language model gives (a tool call or JSON), and "
            "this server has none (setting generator): its answers quote the documents. Leave "
            "it out, or configure an LLM (generator=openai, anthropic or ollama)",
        )

    def generate(self, fit: Fit, on_token: Callable[[str], None]) -> Generation:
        question = fit.prompt.question
        asked = fit.prompt.turn or question  # a follow-up's own words say what it asks to run, if anything
        action = asked_action(asked)
        found = candidates(fit.prompt.sources, asks_to_run(asked) or bool(action)) + named_rows(
            fit.prompt.sources, asked
        )
        if not asks_to_run(asked):  # a command only where it names the action asked for: that line of it
            found = [
                action_line(c, action) if c.command else c for c in found if not c.command or names_action(c, action)
            ]
        # these win over the rest when above the floor (a sentence with the command it introduces, too)
        first = [c.row or names_action(completed(c), action) for c in found]
        scores = self.scores(question, found, fit.prompt.turn) if found else np.zeros(0, dtype=np.float32)
        fresh = [not already_said(c, fit.prompt.said) for c in found]
        chosen = choose(
            *kept(found, scores, fresh), self.quotes, [f for f, new in zip(first, fresh, strict=True) if new]
        )
        if not chosen and found:  # only what the earlier answers said answers it: say it again
            chosen = choose(found, scores, self.quotes, first)
        if not chosen:
            on_token(REFUSAL)
            return Generation(text=REFUSAL, usage=Usage(), finish="stop")
        chosen = [(completed(c), s) for c, s in chosen]
        lines = [LABEL] + [line_of(c) for c, _ in chosen]
        text = ""
        for i, line in enumerate(lines):
            piece = line if i == 0 else "\n" + line
            text += piece
            on_token(piece)
        return Generation(text=text, usage=Usage(), finish="stop", quotes=tuple(quote(c, s) for c, s in chosen))

    def scores(self, question: str, found: list[Candidate], turn: str = "") -> np.ndarray:
        """Each candidate's score: how well the sentence answers the question, weighed with its chunk's evidence.
        A follow-up made standalone (`turn`, its own words) is scored on both, its own words weighing as much."""
        cosines, overlap = self.signals(question, found)
        own = COSINE_WEIGHT * cosines + (1 - COSINE_WEIGHT) * overlap
        if turn:
            cosines, overlap = self.signals(turn, found)
            own = (own + COSINE_WEIGHT * cosines + (1 - COSINE_WEIGHT) * overlap) / 2
        evidence = np.array([c.source.evidence for c in found], dtype=np.float32)
        return np.asarray(combined(own, evidence))

    def signals(self, question: str, found: list[Candidate]) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's query-sentence cosine (the local model) and share of the question's words."""
        embedder = self.embedder()
        q = embed_queries(embedder, [question])[0]
        with self._embedding:
            cosines = embed_documents(embedder, [c.text for c in found]) @ q
        if self._cosines is not None:  # a model whose cosines sit elsewhere, onto the scale FLOOR was chosen on
            (lo, hi), (to_lo, to_hi) = self._cosines
            cosines = to_lo + (cosines - lo) * ((to_hi - to_lo) / (hi - lo))
        words = content_words(question)
        return cosines, np.array([overlap_share(words, c.text) for c in found], dtype=np.float32)


def already_said(c: Candidate, said: tuple[str, ...]) -> bool:
    """Did an earlier answer of the conversation quote this sentence?"""
    text = " ".join(c.text.split()).casefold()
    return any(text in " ".join(earlier.split()).casefold() for earlier in said)


def kept(items: list[Any], scores: np.ndarray, keep: list[bool]) -> tuple[list[Any], np.ndarray]:
    """The items (and their scores) marked to keep."""
    idx = [i for i, k in enumerate(keep) if k]
    return [items[i] for i in idx], scores[idx] if len(scores) else scores


def combined(sentence: Any, evidence: Any) -> Any:
    """A candidate's score from its own (cosine and word overlap) and its chunk's evidence (floats or arrays)."""
    return (1 - EVIDENCE_WEIGHT) * sentence + EVIDENCE_WEIGHT * evidence


def asks_to_run(question: str) -> bool:
    """Does the question ask how to run something (then a command may answer it)?"""
    return bool(_HOW_TO_RUN.search(question))


def asked_action(question: str) -> str:
    """The action a "how do I ..." question asks for, stemmed ("revok" for "how do I revoke a key?"); empty for none."""
    m = _ACTION.search(question)
    word = m.group(1).casefold() if m else ""
    return "" if not word or word in _STOP else _stem(word)


def names_action(c: Candidate, action: str) -> bool:
    """Does the candidate name the action in a command: a shell command, or a sentence's `code` span?"""
    if not action:
        return False
    sentence, _, block = c.text.partition("\n\n")  # a sentence and the block it introduces (`completed`)
    code = c.text if c.command else "\n".join([*_CODE.findall(sentence), block])
    words = _ARGUMENT_TEXT.sub(" ", code.casefold())  # what a command says in quotes or comments names nothing
    return action in {_stem(w) for w in _WORD.findall(words)}


def action_line(c: Candidate, action: str) -> Candidate:
    """A command's first line that names the action (a fence often holds several commands), as its own candidate."""
    pos = c.a
    for line in c.source.text[c.a : c.b].splitlines(keepends=True):
        piece = Candidate(c.source, pos, pos + len(line.rstrip()), line.strip(), True)
        pos += len(line)
        if names_action(piece, action):
            return piece
    return c


_SUFFIX = re.compile(r"(?:ations?|at(?:e|es|ed|ing)|ings?|ed|es|s|ly|ments?|ions?)$")


def _stem(word: str) -> str:
    """A crude stem: common suffixes off, a doubled last letter single, then at most six letters."""
    if len(word) > 3:
        word = _SUFFIX.sub("", word) or word
        if len(word) > 2 and word[-1] == word[-2]:
            word = word[:-1]
    return word[:6]


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.casefold()) if w not in _STOP and (len(w) > 1 or w.isdigit())}


def overlap_share(words: set[str], text: str) -> float:
    return len(words & content_words(text)) / len(words) if words else 0.0


def named_rows(sources: tuple[Source, ...] | list[Source], question: str) -> list[Candidate]:
    """The table rows whose first cell the question names (ragvps.text.named_rows), as candidates: only a specific
    cell, or a row of plain words ("API keys", "name") would go ahead of every sentence that answers better."""
    return [
        Candidate(source, a, b, " | ".join(cells), row=True)
        for source in sources
        for a, b, cells in text_rows(source.text, question, specific=True)
    ]


def candidates(sources: tuple[Source, ...] | list[Source], commands: bool = False) -> list[Candidate]:
    """Every sentence worth quoting (and, when asked for, every shell command), in source order, once."""
    seen: set[str] = set()
    found: list[Candidate] = []
    for source in sources:
        prose, code = quotable(source.text)
        spans = [(a, b, False) for a, b in prose] + ([(a, b, True) for a, b in code] if commands else [])
        for a, b, command in sorted(spans):
            raw = source.text[a:b]
            shown = raw.strip() if command else " ".join(raw.split())
            if not command:  # a quoted "[3]" would read as a citation: keep the sentence's own numbers as (3)
                shown = _NUMBER_MARKER.sub(r"(\1)", shown)
            if (not command and len(shown.split()) < MIN_WORDS) or len(shown) > MAX_QUOTE_CHARS:
                continue
            if shown.casefold() in seen:
                continue
            seen.add(shown.casefold())
            found.append(Candidate(source, a, b, shown, command))
            if len(found) >= MAX_CANDIDATES:
                return found
    return found


def choose(
    found: list[Candidate], scores: np.ndarray, cap: int, first: list[bool] | None = None
) -> list[tuple[Candidate, float]]:
    """The best candidates above the floor (absolute and relative to the best), near-duplicates dropped; those
    marked `first` (naming the action asked for) and above the floor before all others."""
    ahead = [bool(first and first[i]) and float(scores[i]) >= FLOOR for i in range(len(found))]
    order = sorted(range(len(found)), key=lambda i: (not ahead[i], -float(scores[i])))  # ties in source order
    best = float(scores[order[0]]) if order else 0.0
    chosen: list[tuple[Candidate, float]] = []
    kept_words: list[set[str]] = []
    for i in order:
        score = float(scores[i])
        if score < FLOOR or score < RELATIVE * best or len(chosen) >= cap:
            break
        words = content_words(found[i].text) or {found[i].text}
        if any(len(words & w) / len(words | w) >= DUPLICATE for w in kept_words):
            continue
        kept_words.append(words)
        chosen.append((found[i], score))
    return chosen


def completed(c: Candidate) -> Candidate:
    """A sentence ending in a colon with what it introduces (the command, list or table right after it), whole."""
    if c.command or not c.text.endswith(":"):
        return c
    span = introduced(c.source.text, c.b)
    if span is None:
        return c
    return Candidate(c.source, c.a, span[1], c.text + "\n\n" + c.source.text[span[0] : span[1]], c.command)


def line_of(c: Candidate) -> str:
    """A quote's line of the answer: the sentence in quotes, its citation, and what it introduces indented
    under it (a code block or list inside the list item)."""
    sentence, _, block = c.text.partition("\n\n")
    line = f'- "{sentence}" [{c.source.number}]'
    if c.command or not block:
        return f'- "{c.text}" [{c.source.number}]'
    return line + "\n\n" + "\n".join("  " + row if row.strip() else "" for row in block.splitlines())


def quote(c: Candidate, score: float) -> Quote:
    """A quote as Answer.quotes reports it: its source, its span in the source document, its score."""
    s = c.source
    return Quote(
        number=s.number,
        chunk_id=s.chunk_id,
        path=s.path,
        start=s.start + c.a,
        end=s.start + c.b,
        text=c.text,
        score=round(score, 4),
        command=c.command,
    )

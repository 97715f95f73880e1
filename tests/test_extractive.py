"""Extractive answers without a database: which spans are sentences, which are commands, and how quotes are
chosen (the floor, no padding, no near-duplicates, best first, exact spans); the real local model scores them."""

from __future__ import annotations

import dataclasses

import numpy as np

from ragvps.config import Settings
from ragvps.generate import budget
from ragvps.generate.extractive import EVIDENCE_WEIGHT, FLOOR, Extractive, asks_to_run, candidates, choose
from ragvps.generate.prompt import REFUSAL, Source
from ragvps.text import quotable

DOC = """# Keys

Keys come from `RAGVPS_API_KEYS` (several, comma-separated, so you can rotate one at a time).
The server reads them at start.

```bash
export RAGVPS_API_KEYS=one,two
ragvps serve
```

| setting | default |
|---|---|
| api_keys | empty, so every request is refused |

- A key is at least sixteen characters long.
1. Restart the server after you change the file.

Setext heading here
-------------------
"""


def test_sentences_are_prose_only_and_commands_are_whole_fences():
    prose, commands = quotable(DOC)
    said = [DOC[a:b] for a, b in prose]
    assert said[0].startswith("Keys come from") and said[1] == "The server reads them at start."
    assert "A key is at least sixteen characters long." in said  # the list marker is cut from the span
    assert "Restart the server after you change the file." in said
    assert not any("|" in s or "#" in s or "export" in s or "Setext" in s for s in said)
    assert [DOC[a:b] for a, b in commands] == ["export RAGVPS_API_KEYS=one,two\nragvps serve"]


def test_how_to_run_questions_are_told_apart():
    assert asks_to_run("How do I start the server?") and asks_to_run("which command rebuilds the index?")
    assert not asks_to_run("What happens when I run ingest twice?") and not asks_to_run("how do I rotate the keys?")


def _source(text: str, number: int = 1, start: int = 100) -> Source:
    return Source(number, f"keys.md#{number}", "keys.md", "Keys", start, start + len(text), 0.03, text, 0.9)


def test_choose_keeps_only_sentences_above_the_floor_without_duplicates_best_first():
    found = candidates([_source(DOC)])
    scores = np.zeros(len(found), dtype=np.float32)
    scores[1], scores[0] = 0.9, 0.85  # the second sentence is best; the first is within 90% of it
    assert [c.text for c, _ in choose(found, scores, 3)] == [found[1].text, found[0].text]
    assert choose(found, np.zeros(len(found), dtype=np.float32), 3) == []  # nothing above the floor: nothing
    twice = candidates([_source(DOC, 1), _source(DOC.replace("at start", "at the start"), 2, 900)])
    s = np.linspace(0.9, 0.5, len(twice)).astype(np.float32)
    s[len(twice) // 2 + 1] = 0.89  # the near-duplicate of the best one, scored next
    picked = [c.text for c, _ in choose(twice, s, 5)]
    assert len(picked) == len(set(picked)) and "The server reads them at the start." not in picked[:1]


def test_the_local_model_quotes_the_sentence_that_answers_with_its_span():
    from ragvps.embed.registry import make_embedder

    settings = Settings.of(embedder="local")
    embedder = make_embedder(settings)  # the App's embedder, without an App: no database to start
    gen = Extractive(lambda: embedder, "minilm")
    src = _source(DOC)
    fit = budget.fit("how do I rotate the keys?", [src], settings.generate)
    out = gen.generate(fit, lambda _: None)
    assert out.quotes and "rotate one at a time" in out.quotes[0].text
    q = out.quotes[0]
    assert DOC[q.start - src.start : q.end - src.start].startswith("Keys come from")
    assert all(x.score >= FLOOR for x in out.quotes)  # no padding with sentences under the floor
    # an off-topic question whose chunk just passed the gate: no sentence of it answers, so the refusal
    barely = dataclasses.replace(src, evidence=settings.generate.min_evidence)
    off = gen.generate(budget.fit("What is the capital of France?", [barely], settings.generate), lambda _: None)
    assert off.text == REFUSAL and off.quotes == ()


class _EquallyGood(Extractive):
    """Every sentence as close to the question as every other: only the chunks' evidence tells them apart."""

    def signals(self, question: str, found: list) -> tuple[np.ndarray, np.ndarray]:
        return np.full(len(found), 0.6, dtype=np.float32), np.full(len(found), 0.5, dtype=np.float32)


def test_of_equally_good_sentences_the_one_in_the_chunk_that_matches_is_quoted():
    assert EVIDENCE_WEIGHT > 0
    weak = Source(1, "notes.md#1", "notes.md", "", 0, 48, 0.03, "Keys may be rotated one at a time on any server.", 0.3)
    strong = Source(2, "keys.md#4", "keys.md", "Keys", 0, 50, 0.02, "Rotate the keys one at a time, then restart.", 0.9)
    fit = budget.fit("how do I rotate the keys?", [weak, strong], Settings().generate)
    out = _EquallyGood(lambda: None, "none").generate(fit, lambda _: None)  # type: ignore[arg-type,return-value]
    assert [q.chunk_id for q in out.quotes] == ["keys.md#4"]  # first in source order, but weaker evidence
    assert out.quotes[0].score > FLOOR


def test_a_table_row_the_question_names_is_quoted_whole():
    from ragvps.generate.extractive import named_rows
    from ragvps.generate.prompt import Source

    table = (
        '| method and path | what it does |\n|---|---|\n| `GET /health` | `{"status": "ok"}`; 503 while starting |\n'
        "| `POST /search` | the hits |\n"
    )
    src = Source(1, "s#0", "serve.md", "Endpoints", 0, len(table), 1.0, table)
    rows = named_rows([src], "what does GET /health return?")
    assert [r.text for r in rows] == ['`GET /health` | `{"status": "ok"}`; 503 while starting']
    assert table[rows[0].a : rows[0].b].startswith("| `GET /health`") and rows[0].row
    assert named_rows([src], "what is the health of the team?") == []  # the whole first cell, not a word of it
    assert named_rows([src], "what does the method and path column say?") == []  # never the header


def test_answers_at_once_embed_their_sentences_a_core_at_a_time():
    """64 answers at once each embedding 200 sentences held the model's buffers for all of them: a server grew by
    760 MB and kept it (issue 51 part 7). Sentences are embedded by at most a core's worth of answers at once."""
    import os
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from ragvps.embed.registry import make_embedder

    real = make_embedder(Settings.of(embedder="local"))
    busy, most, lock = [0], [0], threading.Lock()

    class Counting:
        spec = real.spec

        def embed(self, texts: list[str]) -> np.ndarray:
            with lock:
                busy[0] += 1
                most[0] = max(most[0], busy[0])
            time.sleep(0.05)  # long enough for the others to pile up, were they let in
            with lock:
                busy[0] -= 1
            return real.embed(texts)

        def embed_questions(self, texts: list[str]) -> np.ndarray:
            return real.embed_questions(texts)

    gen = Extractive(lambda: Counting(), "minilm")  # type: ignore[arg-type, return-value]
    settings = Settings.of(embedder="local")
    fit = budget.fit("how do I rotate the keys?", [_source(DOC)], settings.generate)
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda _: gen.generate(fit, lambda _: None), range(16)))
    assert all(o.quotes for o in outs)
    assert 1 <= most[0] <= (os.cpu_count() or 1)


def test_e5_small_quotes_what_answers_and_refuses_what_does_not_on_its_own_cosines():
    """e5's cosines run from about 0.77 (unrelated) up, where MiniLM's start near 0.15: mapped onto MiniLM's scale,
    on which the floor was chosen, an off-topic sentence stays under the floor instead of above it."""
    from ragvps.backends import E5_MODEL
    from ragvps.embed.registry import make_embedder

    settings = Settings.of(embedder="e5-small")
    embedder = make_embedder(settings)
    gen = Extractive(lambda: embedder, E5_MODEL)
    src = _source(DOC)
    out = gen.generate(budget.fit("how do I rotate the keys?", [src], settings.generate), lambda _: None)
    assert out.quotes and "rotate one at a time" in out.quotes[0].text
    barely = dataclasses.replace(src, evidence=settings.generate.min_evidence)
    off = gen.generate(budget.fit("What is the capital of France?", [barely], settings.generate), lambda _: None)
    assert off.text == REFUSAL and off.quotes == ()

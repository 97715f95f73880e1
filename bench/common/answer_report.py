"""bench/answer_quality.py's section of bench/RESULTS.md: the figures before and after on the evaluation half,
the gate's cost, the signals' power, the held-out trade-off curve and how the defaults were chosen."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from typing import Any

from common import answer_signals as signals
from common import answers as aq

ROWS = [
    ("answerable (SciFact claims, gold abstracts ingested): answered", "answerable", "answered", ">= 0.90"),
    ("answerable: a gold abstract cited (of all answerable)", "answerable", "gold_cited", ">= 0.85"),
    ("answerable: citation precision", "answerable", "citation_precision", "-"),
    ("on-topic unanswerable (gold abstracts in the other half): refused", "unanswerable", "refused", ">= 0.60"),
    (
        "off topic: chroma questions (not its biomedical document's) on SciFact: refused",
        "off_topic_scifact",
        "refused",
        ">= 0.95",
    ),
    (
        "off topic: SciFact claims on chroma without its biomedical document: refused",
        "off_topic_chroma",
        "refused",
        ">= 0.95",
    ),
    ("(biomedical, on topic) chroma's PubMed questions on SciFact: refused", "biomedical_scifact", "refused", "-"),
    (
        "(as the issue first defined it) SciFact claims on all of chroma, PubMed included: refused",
        "claims_chroma",
        "refused",
        "-",
    ),
    ("chroma questions on chroma: answered", "quotes", "answered", "-"),
    ("chroma: gold document cited", "quotes", "gold_cited", "-"),
    ("chroma: quote span precision (characters)", "quotes", "span_precision", "2x before"),
    ("chroma: quote span recall (characters)", "quotes", "span_recall", "-"),
    ("chroma: quotes per answer", "quotes", "quotes_per_answer", "-"),
    ("chroma: answer latency p50, ms", "quotes", "ms_p50", "-"),
]


def section(
    results: dict[str, dict[str, dict[str, float]]],
    args: argparse.Namespace,
    load_before: tuple[float, float, float],
    start: str,
    end: str,
) -> str:
    from ragvps.config import Settings
    from ragvps.generate import extractive as ex
    from ragvps.retrieve import evidence

    b, a = results["before"], results["after"]
    calib = {n: len(qs) for n, (_, qs) in aq.question_sets("calib").items()}

    def fig(d: dict[str, dict[str, float]], s: str, k: str) -> str:
        return f"{d[s][k]:.2f}" if s in d and k in d[s] else "-"

    threshold = Settings().generate.min_evidence
    lines = [
        start,
        "## answer_quality: refusing, answering, quoting (issue 18)",
        "",
        f"`python bench/answer_quality.py` ({datetime.date.today().isoformat()}; {platform.node()}, "
        f"{os.cpu_count()} cores, shared: load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
        + (f"; {args.note}" if getattr(args, "note", "") else "")
        + "). "
        f"Extractive generator (the default), local model (all-MiniLM-L6-v2 int8). `before` is {args.baseline} "
        "(a396595, the code before this issue), `after` this checkout at its defaults (answer_min_evidence "
        f"{threshold}, extractive floor {ex.FLOOR}); both real runs on the same databases.",
        "",
        "**Data.** SciFact: the even lines of scifact-dev's corpus (2,592 abstracts, all of them, 5,724 chunks) are "
        "ingested; claims whose gold abstracts all lie in that half are answerable, claims whose gold abstracts all "
        "lie in the odd half are on topic but unanswerable. Chroma: chroma_chunking's 5 documents (2,122 chunks); "
        "its 472 questions with reference excerpts. **Every question the data gives is used, split in two fixed "
        "halves** by crc32 of the question id: the calibration half ("
        + ", ".join(f"{n} {v}" for n, v in calib.items())
        + ") chose every threshold and weight; **the figures below are the other, evaluation half** (counts in "
        "the last column). One correction to the issue's off-topic sets: chroma_chunking has a PubMed document, "
        "whose questions are biomedical (SciFact's topic) and on which SciFact claims are on topic; the goal rows "
        "leave it out (a 4-document chroma database, `db_chroma_other`), and the rows in parentheses report the "
        "sets as first defined.",
        "",
        "| figure | before | after | goal | questions before / after |",
        "|---|---|---|---|---|",
    ]
    for label, s, k, goal in ROWS:
        n = f"{b.get(s, {}).get('n', 0):.0f} / {a.get(s, {}).get('n', 0):.0f}"
        lines.append(f"| {label} | {fig(b, s, k)} | {fig(a, s, k)} | {goal} | {n} |")
    lines += [
        "",
        "`before` on the sets it should refuse is bounded in time (it has no gate and refuses nothing); the "
        "quote rows compare the questions both versions asked.",
    ]
    lines += gate_lines()
    rows = signals.load(aq.OUT, list(aq.SETS))
    if rows:
        sc = [r["sentence_ms"] for r in rows.get("answerable", []) + rows.get("unanswerable", []) if r["sentence_ms"]]
        sc.sort()
        lines += [
            "",
            "**Signals.** Recorded once per question (`--signals`, retrieval only): how well each, alone "
            "(the best of the 8 hits), tells an answerable claim from an on-topic unanswerable one (AUC: "
            "0.5 is chance), on both halves:",
            "",
        ] + signals.signal_table(rows)
        if sc:
            counts = sorted(r["sentences_embedded"] for r in rows["answerable"] if r["sentence_ms"])
            lines += [
                "",
                f"The best query-sentence cosine needs the top 3 chunks' sentences embedded at query time "
                f"(median {counts[len(counts) // 2]} sentences): {sc[len(sc) // 2]:.0f} ms p50 on this "
                "machine while it was shared "
                f"({len(sc)} questions), against the gate's budget of 5 ms, and it separates no better than "
                "the chunk cosine the vector leg already has; it stays in the extractive answer, which "
                "embeds the sentences anyway. The cheap signals weighted together (a grid of 1,295 "
                "weightings of cosine, terms, sentence terms, margin and rare terms, fitted on the "
                "calibration half, the gate alone), held out: "
                + signals.held_out_weights(rows)
                + ". About +0.05 of on-topic refusal for three more signals in the gate (sentence-level "
                "IDF coverage, which needs to_tsvector over every hit's sentences, the margin and the rarest "
                "terms), with the goal at 0.60: not built. The evidence stays "
                f"{evidence.WEIGHTS['cosine']} x cosine + {evidence.WEIGHTS['terms']} x terms.",
            ]
    curve = {n: aq.jsonl(aq.OUT / f"curve-{n}.jsonl") for n in aq.SETS if (aq.OUT / f"curve-{n}.jsonl").exists()}
    questions = {n: qs for n, (_, qs) in aq.question_sets("eval").items()}
    if curve:
        lines += [
            "",
            "**The trade-off on held-out questions** (the evaluation half, run once with the gate at "
            f"{aq.LOW_GATE} (`--curve`) and its records replayed at each threshold and floor: exact, since a "
            "higher threshold only sends fewer of the same chunks; at the defaults the replay gives, "
            "question for question, what the real run above answered):",
            "",
        ]
        lines += signals.answer_curve(curve, questions, aq.score, floors=(None, 0.45))
    lines += ["", choice_lines()]
    lines += verdict(a, b, curve, questions)
    lines.append(end)
    return "\n".join(lines)


def choice_lines() -> str:
    sets = aq.question_sets("calib")
    records = {n: aq.jsonl(aq.OUT / f"calib-{n}.jsonl") for n in sets if (aq.OUT / f"calib-{n}.jsonl").exists()}
    if len(records) < len(sets):
        return ""
    chosen, grid = signals.choose(records, {n: qs for n, (_, qs) in sets.items()}, aq.score)
    return (
        "**How the defaults were chosen** (`python bench/answer_quality.py --calibrate`: the calibration half, "
        f"run once with the gate at {aq.LOW_GATE}, its records replayed over a grid of {len(grid)} settings: "
        "evidence weight of a quote's chunk "
        + "/".join(map(str, signals.GRID["evidence_weight"]))
        + ", floor "
        + "/".join(map(str, signals.GRID["floor"]))
        + ", threshold "
        + "/".join(map(str, signals.GRID["threshold"]))
        + ", quotes at most "
        + "/".join(map(str, signals.GRID["quotes"]))
        + "). The rule, fixed before any `after` figure of the "
        "evaluation half was seen (the quote cap joined the grid after a look at 27 of its `before` answers' "
        "span precision): the highest on-topic refusal among the settings that answer >= 0.91 of the "
        "answerable claims and refuse >= 0.95 of both off-topic sets; among those within 0.02 of it, the "
        f"highest gold-cited + quote span precision. It chose {chosen}: the shipped defaults "
        "(answer_min_evidence, extractive FLOOR, EVIDENCE_WEIGHT, MAX_QUOTES). Quoting up to two sentences "
        "instead would cite a gold abstract a little more often (+0.03 on the calibration half) at a quarter "
        "less span precision."
    )


def verdict(
    a: dict[str, dict[str, float]],
    b: dict[str, dict[str, float]],
    curve: dict[str, list[dict[str, Any]]],
    questions: dict[str, list[dict[str, Any]]],
) -> list[str]:
    if "answerable" not in a:
        return []
    rows = aq.jsonl(aq.OUT / "after-answerable.jsonl")
    gold = {q["id"]: set(q["gold"]) for q in questions["answerable"]}
    found = sum(any(aq.doc_of(h["chunk_id"]) in gold[r["id"]] for h in r["retrieved"] or []) for r in rows)
    out = ["", "**Against the goals** (evaluation half):"]
    out.append(
        f"- Answerable answered {a['answerable']['answered']:.2f} (goal >= 0.90) and off-topic refused "
        f"{a.get('off_topic_scifact', {}).get('refused', 0):.2f} / "
        f"{a.get('off_topic_chroma', {}).get('refused', 0):.2f} (goal >= 0.95)."
    )
    out.append(
        f"- A gold abstract cited {a['answerable']['gold_cited']:.2f} (goal >= 0.85; before "
        f"{b.get('answerable', {}).get('gold_cited', 0):.2f}, with three quotes and no refusals): not met, "
        f"and not reachable by the answer stage here: a gold abstract is among the 8 chunks retrieved for only "
        f"{found / max(1, len(rows)):.2f} of the answerable claims (retrieval, MiniLM + BM25 on half of "
        "SciFact), and a quote can cite only what was retrieved."
    )
    if curve:
        from ragvps.generate.extractive import FLOOR

        best = None
        for t in [x / 100 for x in range(25, 81)]:
            f = {
                n: aq.score([signals.simulate(r, t, FLOOR) for r in curve[n]], questions[n])
                for n in ("answerable", "unanswerable")
            }
            if f["unanswerable"]["refused"] >= 0.60:
                best = (t, f)
                break
        tail = (
            (
                f"the first threshold that refuses >= 0.60 of them on held-out claims is {best[0]:.2f}, where "
                f"answerable claims are answered {best[1]['answerable']['answered']:.2f}"
            )
            if best
            else "no threshold up to 0.80 refuses 0.60 of them"
        )
        out.append(
            f"- On-topic unanswerable refused {a['unanswerable']['refused']:.2f} (goal >= 0.60): not met; "
            f"{tail}. The best operating point that keeps >= 0.90 answered is the default. Why: every signal "
            "available here (the chunk cosine, IDF coverage of the chunk, of its best sentence and of the "
            "rarest terms, the margin over the other hits, the best query-sentence cosine) tells these claims "
            "from answerable ones with an AUC of 0.6-0.72 (table above); a claim about a paper that is not "
            "ingested meets abstracts on the same genes, drugs and outcomes, which MiniLM and term overlap "
            "cannot tell from the one that makes the claim. A cross-encoder or an LLM judging entailment "
            "would be needed; neither exists on this machine."
        )
    if "quotes" in a and "quotes" in b and b["quotes"].get("span_precision"):
        ratio = a["quotes"]["span_precision"] / b["quotes"]["span_precision"]
        p, q = a["quotes"], b["quotes"]
        out.append(
            f"- Quote span precision {p['span_precision']:.2f} against {q['span_precision']:.2f} before: "
            f"{ratio:.1f}x (goal >= 2x); recall {p['span_recall']:.2f} against {q['span_recall']:.2f} "
            "(one quote instead of three)."
        )
    return out


def gate_lines() -> list[str]:
    path = aq.OUT / "gate-cost.json"
    if not path.exists():
        return []
    g: dict[str, Any] = json.loads(path.read_text())
    return [
        "",
        f"**The gate's cost** (`flock -x /work/quiet.lock python bench/answer_quality.py --gate-cost`; no "
        "other heavy work ran, though uptime's 1-minute average, which lags, still said "
        f"{g.get('load', 0):.1f} "
        f"at its end; chroma questions, {g['n']:.0f}): the hits' details query with the evidence "
        f"columns against the same query without them (what search ran before), plus combining and filtering: "
        f"PostgreSQL execution p50 +{g['server_p50']:.2f} ms ({g['server_details_p50']:.2f} -> "
        f"{g['server_evidence_p50']:.2f} ms, p95 {g['server_evidence_p95']:.2f} ms); wall clock p50 "
        f"{g['wall_details_p50']:.2f} ms without the columns, {g['wall_evidence_p50']:.2f} ms with them "
        f"(+{g['wall_p50']:.2f} ms). Goal: <= 5 ms p50."
        + (
            f" Embedding the top 3 chunks' sentences for the sentence-cosine signal, timed in the same run "
            f"({g['sentences_n']:.0f} questions): {g['sentences_p50']:.0f} ms p50."
            if "sentences_p50" in g
            else ""
        ),
    ]

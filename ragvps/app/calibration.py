"""The calibrate use case: the knowledge base's own calibration set asked, the refusal line and the fusion
fitted (measure/calibrate.py says how), and with `apply` both kept in the knowledge base's settings, with a
record of what they were fitted on in its folder (`calibration.json`), which `ragvps stats` reports."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps.config import Settings
from ragvps.db import catalog
from ragvps.errors import UsageError
from ragvps.measure import calibrate as measure
from ragvps.measure import fusion_fit

if TYPE_CHECKING:
    from ragvps.app.ports import App
    from ragvps.measure.calibrate import Point, Probe
    from ragvps.measure.evaluate import Question
    from ragvps.measure.fusion_fit import Fusion

Progress = Callable[[str, int, int], None]
RECORD = "calibration.json"


@dataclass(frozen=True)
class Gold:
    """Gold questions for the answerable side (`ragvps eval`'s formats), and where they came from."""

    questions: tuple[Question, ...]
    source: str


@dataclass(frozen=True)
class Calibration:
    kb: str
    questions: dict[str, int]  # by kind
    curve: tuple[Point, ...]
    chosen: Point
    current: Point  # the curve at the line in force before
    target: float
    fusion: Fusion
    applied: bool
    at: str
    gold: str | None = None  # the gold questions' source, when they were the answerable ones

    def settings(self) -> dict[str, object]:
        """What --apply keeps in the knowledge base's settings."""
        kept: dict[str, object] = {"answer_min_evidence": self.chosen.line}
        if self.fusion.applies:
            f = self.fusion
            kept |= {"fusion": f.fusion, "rrf_k": f.rrf_k, "vector_weight": f.vector_weight}
        return kept

    def to_json(self) -> dict[str, object]:
        return {
            "kb": self.kb,
            "questions": self.questions,
            "gold": self.gold,
            "target": self.target,
            "applied": self.applied,
            "at": self.at,
            "chosen": dataclasses.asdict(self.chosen),
            "current": dataclasses.asdict(self.current),
            "fusion": dataclasses.asdict(self.fusion),
            "curve": [dataclasses.asdict(p) for p in self.curve],
        }


def calibrate(app: App, n: int, target: float, apply: bool, progress: Progress, gold: Gold | None) -> Calibration:
    if not 0 < target <= 1:
        raise UsageError(f"--target {target}: give the share of answerable questions to keep answered, in (0, 1]")
    with app.connection() as conn:
        eset = app.active_set(conn, "calibrate")
        answerable, held_out = measure.gold_probes(conn, gold.questions) if gold else ([], measure.HeldOut())
        found = measure.probes(conn, app.settings.search.language, n, held_out, answerable)
        conn.commit()
        if sum(p.kind == "answerable" for p in found) < 10:
            raise UsageError(
                f"knowledge base {app.kb_name!r} gives fewer than 10 answerable questions to calibrate "
                "on: "
                + ("give more gold questions whose documents are in it" if gold else "ingest more documents first")
            )
        observed = []
        asked = measure.observe_all(conn, eset, app.settings, found, app.embed_queries, held_out)
        for i, seen in enumerate(asked, 1):
            observed.append(seen)
            progress("ask", i, len(found))
        conn.commit()
    curve = tuple(measure.curve(observed))
    now = min(curve, key=lambda p: abs(p.line - app.settings.generate.min_evidence))
    done = Calibration(
        kb=app.kb_name,
        questions={k: sum(p.kind == k for p in found) for k in ("answerable", "unanswerable", "off_topic")},
        curve=curve,
        chosen=measure.choose(curve, target),
        current=now,
        target=target,
        fusion=fit_fusion(app, n, [p for p in found if p.kind == "answerable"] if gold else None),
        applied=apply,
        at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        gold=gold.source if gold else None,
    )
    if apply:
        keep(app, done)
    return done


def fit_fusion(app: App, n: int, gold: list[Probe] | None) -> Fusion:
    """The fusion fitted on the gold questions when given, else on `n` questions made from the chunks' sentences
    (measure/fusion_fit.py)."""
    with app.connection() as conn:
        eset = app.active_set(conn, "calibrate")
        probes = (
            [fusion_fit.FusionProbe(p.question, p.gold) for p in gold]
            if gold is not None
            else fusion_fit.sentence_probes(conn, n)
        )
        conn.commit()
        vectors = app.embed_queries([p.question for p in probes])
        observed = list(fusion_fit.observe(conn, eset, app.settings, probes, vectors))
        conn.commit()
    return fusion_fit.fit(observed, app.settings, "gold" if gold is not None else "sentences")


def keep(app: App, done: Calibration) -> None:
    with app.connection() as conn:
        catalog.update_settings(conn, done.kb, done.settings())
        conn.commit()
    folder = app.settings.database.kb_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECORD).write_text(json.dumps(done.to_json(), indent=1), encoding="utf-8")


def refusal_line(app: App) -> dict[str, object]:
    """The line in force and where it came from: a calibration kept with --apply, the knowledge base's own
    setting, the settings (file, environment), or the default."""
    line = app.settings.generate.min_evidence
    kept = app.kb.settings if app.kb is not None else {}
    record = app.settings.database.kb_dir / RECORD
    if "answer_min_evidence" in kept and record.is_file():
        data = json.loads(record.read_text(encoding="utf-8"))
        chosen = data.get("chosen", {})
        if abs(float(chosen.get("line", -1)) - line) < 1e-9:
            q = data.get("questions", {})
            return {
                "line": line,
                "from": f"ragvps calibrate --apply on {data.get('at')}: {sum(q.values())} "
                f"questions; answers {chosen.get('answered')} of the answerable, refuses "
                f"{chosen.get('refused_unanswerable')} of the held-out and {chosen.get('refused_off_topic')} "
                "of the off-topic ones",
            }
    if "answer_min_evidence" in kept:
        return {"line": line, "from": "the knowledge base's setting"}
    if line != Settings().generate.min_evidence:
        return {"line": line, "from": "the setting answer_min_evidence"}
    return {"line": line, "from": "the default"}


def fusion_in_force(app: App) -> dict[str, object]:
    """The fusion in force and where it came from: a calibration kept with --apply, the knowledge base's own
    settings, the settings (file, environment), or the default."""
    s = app.settings.search
    now = {"fusion": s.fusion, "vector_weight": s.vector_weight, "rrf_k": s.rrf_k}
    kept = app.kb.settings if app.kb is not None else {}
    record = app.settings.database.kb_dir / RECORD
    if "fusion" in kept and record.is_file():
        data = json.loads(record.read_text(encoding="utf-8"))
        fitted = data.get("fusion", {})
        if data.get("applied") and all(fitted.get(k) == v for k, v in now.items()):
            return now | {
                "from": f"ragvps calibrate --apply on {data.get('at')}: fitted on {fitted.get('questions')} "
                f"{'gold questions' if fitted.get('source') == 'gold' else 'sentences of the chunks'}, "
                f"MRR@10 {fitted.get('mrr')} against {fitted.get('current_mrr')} before"
            }
    if kept.keys() & now.keys():
        return now | {"from": "the knowledge base's settings"}
    default = Settings().search
    if now != {"fusion": default.fusion, "vector_weight": default.vector_weight, "rrf_k": default.rrf_k}:
        return now | {"from": "the settings"}
    return now | {"from": "the default"}

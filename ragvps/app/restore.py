"""`ragvps restore-check`: a backup proven by restoring it. The bundle is imported into a scratch knowledge base,
measured as its source was (its gold questions through eval, or else its probe), compared with the figures
recorded at backup time, and dropped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.app.bundles import SCRATCH_PREFIX, _raw, bundle_settings, opened
from ragvps.app.core import App
from ragvps.app.kbs import drop
from ragvps.app.probe import run_probe
from ragvps.config import Settings
from ragvps.db import eval_record, store
from ragvps.db.bundle_export import bundle_sql
from ragvps.db.bundle_import import import_bundle
from ragvps.db.connections import SingleConnection
from ragvps.measure.evaluate import Question

if TYPE_CHECKING:
    from ragvps.db.bundle_manifest import Manifest
    from ragvps.db.eval_record import GoldRow, ScoreRow

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
SCORE_TOLERANCE = 0.005  # an HNSW graph built again may order a near tie differently
DISTANCE_TOLERANCE = 1e-4  # the same model on another machine's CPU


@dataclass
class CheckReport:
    bundle: Path
    kb: str  # the knowledge base the bundle was taken from
    method: str  # gold | probe | counts
    passed: bool = True
    figures: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.passed = False
        self.failures.append(message)


def _quiet(*_: object) -> None:
    pass


def restore_check(settings: Settings, path: Path, progress: Progress = _quiet, warn: Warn = _quiet) -> CheckReport:
    """Import `path` into a scratch knowledge base, measure it, compare with the bundle's figures, drop it."""
    with opened(path, progress) as bundle:
        manifest = bundle.manifest
        scratch = f"{SCRATCH_PREFIX}{bundle.id[:12]}"
        report = CheckReport(path, manifest.kb_name, "counts")
        try:
            target, kept = bundle_settings(settings, bundle)
            with _raw(settings) as conn:
                import_bundle(conn, bundle, scratch, target, kept, replace=True, progress=progress, warn=warn)
            with App.open(settings.replace(kb=scratch)) as app:
                _measure(app, manifest, report, progress)
        finally:
            connections = SingleConnection(settings)
            try:
                drop(settings, connections, scratch)
            finally:
                connections.close()
    _record(settings, path, report)
    return report


def _measure(app: App, manifest: Manifest, report: CheckReport, progress: Progress) -> None:
    with app.connection() as conn:
        facts = store.kb_facts(conn)
        gold, scores = eval_record.recorded(conn)
    want = manifest.chunks
    report.figures.append(f"chunks: {facts.chunks:,} restored, {want:,} in the bundle")
    if facts.chunks != want:
        report.fail(f"{facts.chunks} chunks restored, the bundle holds {want}")
    probe = manifest.probe
    if gold and scores:
        report.method = "gold"
        _compare_eval(app, gold, scores, report, progress)
    elif isinstance(probe, dict):
        report.method = "probe"
        _compare_probe(app, probe, report)
    else:
        report.figures.append("no gold questions and no probe: counts and checksums checked only")


def _compare_eval(
    app: App, gold: list[GoldRow], scores: list[ScoreRow], report: CheckReport, progress: Progress
) -> None:
    rows = gold
    recorded = {s.mode: s for s in scores}
    first = next(iter(recorded.values()))
    questions = [Question(g.id, g.question, g.relevant, g.answer) for g in rows]
    result = app.evaluate(questions, "bundle gold questions", list(recorded), first.k, first.depth, progress)
    for mode, then in recorded.items():
        now = result.modes[mode]
        pairs = (("recall", then.recall, now.recall), ("MRR", then.mrr, now.mrr), ("nDCG", then.ndcg, now.ndcg))
        report.figures.append(
            f"{mode}: " + ", ".join(f"{label}@{first.k} {b:.4f} (recorded {a:.4f})" for label, a, b in pairs)
        )
        for label, a, b in pairs:
            if abs(a - b) > SCORE_TOLERANCE:
                report.fail(f"{mode} {label}@{first.k} is {b:.4f}, recorded {a:.4f} (tolerance {SCORE_TOLERANCE})")


def _compare_probe(app: App, probe: dict[str, object], report: CheckReport) -> None:
    results = run_probe(app, probe)
    same = sum(1 for _, then, now, diff in results if then == now and diff <= DISTANCE_TOLERANCE)
    worst = max((diff for *_, diff in results), default=0.0)
    report.figures.append(
        f"probe: {same} of {len(results)} chunks' first sentences find the same top-"
        f"{probe.get('k')} as at backup time (largest distance difference {worst:.2e})"
    )
    for text, then, now, diff in results:
        if then != now or diff > DISTANCE_TOLERANCE:
            report.fail(f"{text[:60]!r}: top {now[:5]}... now, {then[:5]}... at backup time")


def _record(settings: Settings, path: Path, report: CheckReport) -> None:
    """Say in the catalog's list of backups (if it is one of them) whether it restored."""
    note = "; ".join(report.failures or report.figures)[:2000]
    with _raw(settings) as conn:
        conn.execute(bundle_sql("backup_checked"), {"ok": report.passed, "note": note, "file": str(path.resolve())})

"""`ragvps eval`, `check-index`, `stats` and `doctor`: what the knowledge base is worth and costs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ragvps.cli.common import Bars, KbOption, counted, echo_json, err, open_app, warn
from ragvps.config import reranker_on
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.app import StatsReport
    from ragvps.app.bundles import LastBackup


def eval_(
    ctx: typer.Context,
    gold: Annotated[
        Path | None, typer.Argument(help="Gold file: JSON Lines with question, doc, optional answer.")
    ] = None,
    queries: Annotated[Path | None, typer.Option(help="BEIR queries.jsonl (with --qrels).")] = None,
    qrels: Annotated[Path | None, typer.Option(help="BEIR qrels.tsv: query-id, corpus-id, score.")] = None,
    k: Annotated[int, typer.Option("--k", "-k", help="Cut-off for recall, MRR and nDCG.")] = 10,
    modes: Annotated[str, typer.Option(help="Comma-separated search modes to compare.")] = "vector,keyword,hybrid",
    depth: Annotated[int, typer.Option(help="Chunks retrieved per question and mode (the curve's length).")] = 40,
    report: Annotated[Path | None, typer.Option(help="Write a self-contained HTML report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics and per-question ranks as JSON.")] = False,
    rerank: Annotated[
        bool,
        typer.Option(
            "--rerank", help="Reorder each search's top rerank_candidates with the reranker API (measures its gain)."
        ),
    ] = False,
    kb: KbOption = None,
) -> None:
    """Recall@k, MRR@k and nDCG@k of each search mode over gold questions, side by side."""
    from ragvps.app import evaluation  # lazy: the use case loads when the command runs (--help start-up)

    chosen = evaluation.check_modes(modes)
    if k < 1 or depth < 1:
        raise UsageError("--k and --depth must be at least 1")
    questions, source = evaluation.questions_from(gold, queries, qrels, warn)
    depth = max(depth, k)
    with open_app(ctx, kb=kb, reranker=reranker_on() if rerank else None) as app, Bars() as bars:
        result = app.evaluate(questions, source, chosen, k, depth, bars, warn)
        if gold is not None and not rerank:  # kept for backups: restore-check measures a restored copy the same way
            evaluation.record(app, questions, result)
    if report is not None:
        report.write_text(evaluation.eval_html(result, f"ragvps eval: {source}"), encoding="utf-8")
    if as_json:
        return echo_json(evaluation.report_dict(result))
    typer.echo(
        f"{result.questions} questions from {source}; documents ranked by their best chunk in the top {depth} chunks"
    )
    typer.echo(f"{'mode':<8}  {f'recall@{k}':>10}  {f'MRR@{k}':>8}  {f'nDCG@{k}':>8}  {f'no hit (top {depth})':>16}")
    for mode, s in result.modes.items():
        typer.echo(f"{mode:<8}  {s.recall:>10.3f}  {s.mrr:>8.3f}  {s.ndcg:>8.3f}  {s.no_hit:>16}")
    if report is not None:
        err.print(f"report written to {report}")


def check_index(
    ctx: typer.Context,
    questions: Annotated[
        Path | None,
        typer.Option(
            help="Sample these questions (a gold file or BEIR queries.jsonl) instead of stored chunk vectors."
        ),
    ] = None,
    sample: Annotated[int, typer.Option(help="How many questions or chunks to sample.")] = 100,
    k: Annotated[int, typer.Option("--k", "-k", help="Compare the top k.")] = 10,
    target: Annotated[float, typer.Option(help="The overlap to reach.")] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    kb: KbOption = None,
) -> None:
    """How much of the exact top-k the HNSW index finds at the current ef_search, and the ef_search for --target."""
    from ragvps.app import evaluation  # lazy: the use case loads when the command runs (--help start-up)

    if sample < 1 or k < 1 or not 0 < target <= 1:
        raise UsageError("--sample and --k must be at least 1, --target between 0 and 1")
    loaded = evaluation.load_queries(questions) if questions is not None else None
    with open_app(ctx, kb=kb) as app, Bars() as bars:
        result = app.check_index(loaded, sample, k, target, bars, source=str(questions))
    if as_json:
        return echo_json(evaluation.index_check_dict(result))
    if result.index is None:
        typer.echo(result.note)
        return
    what = "stored chunk vectors (each without itself)" if result.source == "chunks" else f"questions from {questions}"
    current = result.current_ef_search
    typer.echo(
        f"HNSW index {result.index} over {result.rows:,} vectors; {result.sample} {what}; "
        f"overlap of the HNSW top-{k} with the exact top-{k}:"
    )
    for ef, value in result.overlap.items():
        typer.echo(f"  ef_search {ef:>4}: {value:.3f}" + ("  <- current" if ef == current else ""))
    if result.ef_search_for_target is None:
        typer.echo(
            f"no ef_search up to {max(result.overlap)} reaches {target}: rebuild with a larger hnsw_m "
            "or hnsw_ef_construction"
        )
    else:
        typer.echo(
            f"ef_search {result.ef_search_for_target} reaches {target}"
            + ("" if result.ef_search_for_target > current else f" (current {current} is enough)")
        )


def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print every figure as JSON.")] = False,
    kb: KbOption = None,
) -> None:
    """Rows and sizes of the index beside the machine's memory; warns when the vector index outgrows RAM."""
    from ragvps.app.bundles import last_backups  # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.health import replica_states  # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.sources import list_sources  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb) as app:
        s = app.stats()
        good, last = last_backups(app)
        sources = list_sources(app)
        replicas = replica_states(app.settings, app.connections)
    if as_json:
        return echo_json(
            vars(s) | {"last_good_backup": good, "last_backup": last, "sources": sources, "replicas": replicas}
        )
    _print_sizes(s)
    c = s.answer_cache
    typer.echo(f"answer cache: {c['entries']:,} entries, {c['hits']:,} hits, {c['tokens_saved']:,} LLM tokens saved")
    qu = s.queue
    if qu and (qu["pending"] or qu["claimed"] or qu["done"]):
        typer.echo(f"embedding queue: {qu['pending']:,} pending, {qu['claimed']:,} claimed, {qu['done']:,} done")
        for name, w in qu["workers"].items():
            typer.echo(
                f"    {name}: {w['done']:,} done in {w['batches']:,} batches, {w['claimed']:,} claimed now, "
                f"last seen {w['last_seen']}"
            )
    typer.echo(_backup_line(good, last))
    for src in sources:
        when = f"synced {src.synced_at:%Y-%m-%d %H:%M}" if src.synced_at else "never synced"
        typer.echo(
            f"source {src.name} ({src.kind}, {src.location}): {counted(src.items, 'item')}, {when}, {src.state}"
            + (f": {src.error}" if src.error and src.state != "ok" else "")
        )
    for r in replicas:
        lag = f", {r.lag_s:.1f} s behind" if r.lag_s is not None else ""
        typer.echo(f"replica {r.name}: {r.state}{lag}" + (f" ({r.problem})" if r.problem else ""))
    for w in s.warnings:
        warn(w)


def _print_sizes(s: StatsReport) -> None:
    """Rows, tables, vectors and RAM; the refusal line and fusion in force; the disk a rebuild needs; the embedder."""
    from ragvps.app.evaluation import mib  # lazy: the use case loads when the command runs (--help start-up)

    rows, es = s.rows, s.embedding_set
    typer.echo(
        f"{rows['documents']:,} documents, {rows['chunks']:,} chunks, {rows['vectors']:,} vectors "
        f"({es['model']}, {es['vector_type']}({es['dims']})) from {rows['roots']} ingested folder(s)"
    )
    for name, t in s.tables.items():
        typer.echo(
            f"{name}: {mib(t['total_bytes'])} total = heap {mib(t['heap_bytes'])}, "
            f"TOAST {mib(t['toast_bytes'])}, indexes {mib(t['indexes_bytes'])}"
        )
        for index, i in t["indexes"].items():
            typer.echo(f"    {index} ({i['method']}): {mib(i['bytes'])}")
    v, m, p, d, e = s.vectors, s.memory, s.postgres, s.disk, s.embedder
    typer.echo(
        f"vectors: plan's raw estimate {mib(v['plan_raw_bytes'])}, measured table "
        f"{mib(v['measured_table_bytes'])} (heap {mib(v['measured_heap_bytes'])})"
    )
    ram = (
        f"{mib(m['ram_total_bytes'])} total, {mib(m['ram_available_bytes'])} available"
        if m["ram_total_bytes"] is not None
        else "unknown"
    )
    typer.echo(f"RAM: {ram}; shared_buffers {p['shared_buffers']}, maintenance_work_mem {p['maintenance_work_mem']}")
    typer.echo(f"RAM verdict: {s.ram['verdict']}")
    typer.echo(f"refusal line: answer_min_evidence {s.refusal['line']:g}, from {s.refusal['from']}")
    f = s.fusion
    typer.echo(
        f"fusion: {f['fusion']}, vector_weight {f['vector_weight']:g}"
        + (f", rrf_k {f['rrf_k']}" if f["fusion"] == "rrf" else "")
        + f", from {f['from']}"
    )
    free = f", {mib(d['free_bytes'])} free" if d["free_bytes"] is not None else ""
    typer.echo(f"disk for a rebuild: about {mib(d['rebuild_bytes'])}{free}")
    memory = mib(e["memory_bytes"]) if e["memory_bytes"] is not None else "unknown"
    typer.echo(f"embedder {e['kind']} ({e['model']}): {memory} ({e['note']})")


def _backup_line(good: LastBackup | None, last: LastBackup | None) -> str:
    if good is None:
        unproven = f" (newest, not proven by restore-check: {last.file}, {last.made_at:%Y-%m-%d %H:%M})" if last else ""
        return "last good backup: none" + unproven
    line = (
        f"last good backup: {good.file} ({good.bytes / 2**20:,.1f} MiB), made {good.made_at:%Y-%m-%d %H:%M}, "
        f"restore-checked {good.checked_at:%Y-%m-%d %H:%M}"
    )
    if last is not None and last.file != good.file:
        line += f"; a newer one is not proven: {last.file}"
    return line


def doctor(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
    kb: KbOption = None,
) -> None:
    """Check the embedder before a long run: the model's dimension and context length, and the index's model."""
    from ragvps.app import json_object  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb) as app:
        report = app.doctor()
    if as_json:
        echo_json({k: v for k, v in json_object(report).items() if k != "lines"})
    else:
        for line in report.lines:
            typer.echo(line)
        for problem in report.problems:
            err.print(f"[red]problem:[/red] {escape(problem)}")
    if report.problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
    app.command("check-index")(check_index)
    app.command()(stats)
    app.command()(doctor)

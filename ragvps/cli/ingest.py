"""`ragvps ingest`, `ragvps reindex` and `ragvps chunk`: the pipeline's stages, run from the command line."""

from __future__ import annotations

import json
import signal
import threading
from typing import TYPE_CHECKING, Annotated, cast

import typer

from ragvps.cli.common import Bars, KbOption, counted, echo_json, open_app, settings_from, skipped_text, warn
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.app import IngestReport


def ingest(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Folder (or file) of documents.")],
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk (default: the model's).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Tokens shared by neighbouring windows.")] = None,
    defer_embedding: Annotated[
        bool | None,
        typer.Option("--defer-embedding", help="Store and queue the chunks; `ragvps worker` processes embed them."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    kb: KbOption = None,
) -> None:
    """Chunk, embed and store a folder of documents; only what changed is redone."""
    with (
        open_app(
            ctx,
            kb=kb,
            reading=path,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            defer_embedding=defer_embedding,
        ) as app,
        Bars() as bars,
    ):
        report = app.ingest(path, bars, warn)
    if as_json:
        return echo_json(report)
    typer.echo(_summary(report))
    if len(report.hosts) > 1:
        for url, h in report.hosts.items():
            rate = f"{h['chunks_per_s']:g} chunks/s" if h["chunks_per_s"] else "no rate"
            typer.echo(
                f"  {url}: {h['chunks']} chunks in {h['batches']} batches, {rate}, {h['state']}"
                + (f" ({h['reason']})" if h["reason"] else "")
            )


def _summary(report: IngestReport) -> str:
    return (
        f"{counted(report.files, 'file')}, {counted(report.documents, 'document')}, {counted(report.chunks, 'chunk')}; "
        f"embedded {report.embedded}, stored {report.stored} documents, unchanged {report.unchanged}, "
        f"deleted {report.deleted}"
        + (f"; skipped {skipped_text(report.skipped)}" if report.skipped else "")
        + (f"; queued {report.queued} for `ragvps worker`" if report.queued else "")
    )


def watch(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Folder of documents to keep in sync.")],
    debounce_ms: Annotated[int, typer.Option(help="Changes this close together are one batch.")] = 1600,
    as_json: Annotated[bool, typer.Option("--json", help="Print each ingest's report as one JSON line.")] = False,
    kb: KbOption = None,
) -> None:
    """Keep the knowledge base in sync with a folder: ingest it, then again after each batch of changes.

    Only changed files are re-read; a deleted file's document is removed; a file moved to another folder
    embeds nothing (its chunks' vectors are cached). Stops on Ctrl-C or SIGTERM.
    """
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def show(report: IngestReport, changes: int) -> None:
        if as_json:
            # jsonable, not asdict: asdict rebuilds the skipped Counter from its (reason, count) pairs, as keys
            from ragvps.app import jsonable  # lazy: the app's records load psycopg, which --help need not

            typer.echo(json.dumps({"changes": changes, **cast(dict[str, object], jsonable(report))}))
        else:
            typer.echo((f"{counted(changes, 'change')}: " if changes else "") + _summary(report))

    with open_app(ctx, kb=kb) as app:
        app.watch(path, show, stop=stop, warn=warn, debounce_ms=debounce_ms)


def reindex(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    every: Annotated[bool, typer.Option("--all", help="Every knowledge base, one at a time.")] = False,
    kb: KbOption = None,
) -> None:
    """Nightly job: re-sync every ingested folder and rebuild the vector index.

    With another embedding model configured, first re-embed the stored chunks with it and switch over
    when done; queries keep using the old vectors until then.
    """
    if every and kb is not None:
        raise UsageError("--all reindexes every knowledge base: leave out --kb")
    names = _all_kbs(ctx) if every else [kb]
    for name in names:
        with open_app(ctx, kb=name) as app, Bars() as bars:
            result = app.reindex(bars, warn)
        if as_json:
            echo_json(result)
            continue
        if every:
            typer.echo(f"knowledge base {name}:")
        if result.switch:
            s = result.switch
            typer.echo(
                f"switched from {s.old_model} to {s.new_model}: {s.chunks} chunks, embedded {s.embedded} "
                f"(the rest from the vector cache), no source re-read"
            )
        for root, report in result.roots.items():
            typer.echo(f"{root}: embedded {report.embedded}, stored {report.stored}, deleted {report.deleted}")


def _all_kbs(ctx: typer.Context) -> list[str | None]:
    from ragvps.app.library import Library  # lazy: the use case loads when the command runs (--help start-up)

    with Library.open(settings_from(ctx)) as library:
        return list(library.catalog(fresh=True))


def chunk(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Folder (or file) of documents.")],
    mode: Annotated[str | None, typer.Option(help="structure | fixed | sentences (default: structure).")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk (default: the model's).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Tokens shared by neighbouring windows.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run the chunk stage alone: write the chunk files and summarise them (no database, no embedding)."""
    settings = settings_from(ctx, chunk_mode=mode, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    # lazy: the use case loads when the command runs (--help start-up); not the App, which this command does not need
    from ragvps.app.chunking import chunk_summary
    from ragvps.app.reading import start_readers

    start_readers(path)
    with Bars() as bars:
        s = chunk_summary(settings, path, bars, warn)
    if as_json:
        return echo_json(s)
    t = s.tokens or {"min": 0, "median": 0, "max": 0}
    typer.echo(
        f"{counted(s.files, 'file')}, {counted(s.documents, 'document')}, {counted(s.chunks, 'chunk')} "
        f"({s.mode}, {s.chunk_size} tokens, overlap {s.chunk_overlap}; {counted(s.rechunked_files, 'file')} chunked); "
        f"tokens per chunk min {t['min']} / median {t['median']:g} / max {t['max']} of {s.limit} allowed"
        + (f"; skipped {skipped_text(s.skipped)}" if s.skipped else "")
    )


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(watch)
    app.command()(reindex)
    app.command()(chunk)

"""The command line: builds the settings once, runs a stage, prints for people (or --json for machines)."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ragvps.config import Settings, load_settings
from ragvps.errors import RagvpsError, redact

err = Console(stderr=True, highlight=False, soft_wrap=True)


class _Group(TyperGroup):
    """Turns every RagvpsError into one line on stderr and its exit code; tracebacks only with --verbose."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RagvpsError as exc:
            _fail(ctx, exc, exc.exit_code)
        except KeyboardInterrupt:
            err.print("interrupted: finished work is saved; run the same command again to resume")
            raise typer.Exit(130) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # an unexpected failure still gets one readable line
            _fail(ctx, exc, 1, prefix="unexpected error (run with --verbose for the traceback): ")


def _fail(ctx: click.Context, exc: BaseException, code: int, prefix: str = "") -> None:
    if (ctx.obj or {}).get("verbose"):
        err.print(escape(redact("".join(traceback.format_exception(exc)))))
    err.print(f"[red]error:[/red] {escape(prefix + redact(str(exc)))}")
    raise typer.Exit(code)


app = typer.Typer(
    cls=_Group,
    help="ragvps: a self-hosted RAG pipeline. Ingest a folder, query it, measure it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Config file (default: ./ragvps.toml if present).")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where stage files and the embedded database live.")] = None,
    database_url: Annotated[str | None, typer.Option(help="PostgreSQL DSN; empty: the embedded server.")] = None,
    embedder: Annotated[str | None, typer.Option(help="local | ollama")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details and show tracebacks.")] = False,
) -> None:
    ctx.obj = {"verbose": verbose, "config": config,
               "flags": {"data_dir": data_dir, "database_url": database_url, "embedder": embedder}}
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


def settings_from(ctx: typer.Context, **flags: Any) -> Settings:
    obj = ctx.obj or {}
    return load_settings(obj.get("config"), **(obj.get("flags", {}) | flags))


def _warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {escape(message)}")


class _Bars:
    """One rich progress bar per stage, on stderr."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description:>6}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err, transient=False)
        self.tasks: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(stage, total=total)
        self.progress.update(self.tasks[stage], completed=done, total=total)

    def __enter__(self) -> _Bars:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


@app.command()
def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="Folder (or file) of documents.")],
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk (default: the model's).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Tokens shared by neighbouring windows.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Chunk, embed and store a folder of documents; only what changed is redone."""
    from ragvps.embed import make_embedder
    from ragvps.models import spec_for
    from ragvps.pipeline import ingest as run_ingest

    settings = settings_from(ctx, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    spec = spec_for(settings)
    with _Bars() as bars:
        report = run_ingest(settings, path, spec, lambda: make_embedder(settings), bars, _warn)
    if as_json:
        typer.echo(json.dumps(asdict(report) | {"skipped": dict(report.skipped)}, indent=2))
        return
    typer.echo(
        f"{report.files} files, {report.documents} documents, {report.chunks} chunks; "
        f"embedded {report.embedded}, stored {report.stored} documents, unchanged {report.unchanged}, "
        f"deleted {report.deleted}"
        + (f"; skipped {_skipped(report.skipped)}" if report.skipped else "")
    )


def _skipped(skipped: dict[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))


@app.command()
def query(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The question.")],
    k: Annotated[int | None, typer.Option("--k", "-k", help="How many chunks to return (default 8).")] = None,
    mode: Annotated[str, typer.Option(help="hybrid | vector | keyword")] = "hybrid",
    as_json: Annotated[bool, typer.Option("--json", help="Print the hits as JSON.")] = False,
) -> None:
    """Hybrid search: vector top-40 and full-text top-40, fused by reciprocal rank fusion."""
    from ragvps import store
    from ragvps.database import connect
    from ragvps.embed import embed_queries, make_embedder
    from ragvps.errors import UsageError
    from ragvps.models import spec_for
    from ragvps.search import MODES, check_query, search

    if mode not in MODES:
        raise UsageError(f"--mode {mode!r} is not one of: {', '.join(MODES)}")
    settings = settings_from(ctx, top_k=k)
    text = check_query(text)
    spec = spec_for(settings)
    with connect(settings) as conn:
        eset = store.active_set(conn)
        if eset is None:
            raise UsageError("nothing is ingested yet: run `ragvps ingest PATH` first")
        store.check_model(eset, spec, settings.vector_type, "query")
        embedding = embed_queries(make_embedder(settings), [text])[0] if mode != "keyword" else None
        hits = search(conn, eset, text, embedding, settings, mode)  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps([asdict(h) for h in hits], indent=2, ensure_ascii=False))
        return
    if not hits:
        err.print("no matching chunks")
    for h in hits:
        snippet = " ".join(h.text.split())
        snippet = snippet[:200] + ("..." if len(snippet) > 200 else "")
        typer.echo(f"{h.rank:>2}  {h.score:.4f}  {h.path}" + (f"  [{h.heading_path}]" if h.heading_path else ""))
        typer.echo(f"    {snippet}")


@app.command()
def reindex(ctx: typer.Context) -> None:
    """Nightly job: re-sync every ingested folder and rebuild the vector index."""
    from ragvps.embed import make_embedder
    from ragvps.models import spec_for
    from ragvps.pipeline import reindex as run_reindex

    settings = settings_from(ctx)
    with _Bars() as bars:
        reports = run_reindex(settings, spec_for(settings), lambda: make_embedder(settings), bars, _warn)
    for root, report in reports.items():
        typer.echo(f"{root}: embedded {report.embedded}, stored {report.stored}, deleted {report.deleted}")


@app.command()
def chunk(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="Folder (or file) of documents.")],
    mode: Annotated[str | None, typer.Option(help="structure | fixed | sentences (default: structure).")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk (default: the model's).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Tokens shared by neighbouring windows.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run the chunk stage alone: write the chunk files and summarise them (no database, no embedding)."""
    import statistics

    from ragvps import sources
    from ragvps.models import spec_for
    from ragvps.pipeline import IngestReport, chunk_stage, chunker_config

    settings = settings_from(ctx, chunk_mode=mode, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    spec = spec_for(settings)
    config = chunker_config(settings, spec)
    report = IngestReport()
    scan = sources.scan(path)
    report.skipped.update(scan.skipped)
    for w in scan.warnings:
        _warn(w)
    with _Bars() as bars:
        files = chunk_stage(settings, path.resolve(), scan, config, report, bars, _warn)
    counts = sorted(c.tokens for f in files for c in f.chunks)
    limit = config.max_tokens - 2 - _count(config.prefix)
    summary: dict[str, Any] = {
        "files": len(files), "documents": sum(len(f.documents) for f in files), "chunks": len(counts),
        "rechunked_files": report.rechunked_files, "mode": config.mode, "chunk_size": config.size,
        "chunk_overlap": config.overlap, "model": spec.name, "max_tokens": config.max_tokens,
        "tokens": {"min": counts[0], "median": statistics.median(counts), "max": counts[-1],
                   "total": sum(counts), "over_limit": sum(n > limit for n in counts)} if counts else None,
        "llm_tokens": sum(c.llm_tokens for f in files for c in f.chunks),
        "skipped": dict(report.skipped), "chunk_dir": str(settings.data_dir / "chunks"),
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    t: dict[str, Any] = summary["tokens"] or {"min": 0, "median": 0, "max": 0}
    typer.echo(
        f"{summary['files']} files, {summary['documents']} documents, {summary['chunks']} chunks "
        f"({config.mode}, {config.size} tokens, overlap {config.overlap}; {report.rechunked_files} files chunked); "
        f"tokens per chunk min {t['min']} / median {t['median']:g} / max {t['max']} of {limit} allowed"
        + (f"; skipped {_skipped(report.skipped)}" if report.skipped else "")
    )


def _count(text: str) -> int:
    from ragvps.tokens import count

    return count(text)


server = typer.Typer(help="The embedded PostgreSQL server under the data directory.", no_args_is_help=True)
app.add_typer(server, name="server")


@server.command("stop")
def server_stop(ctx: typer.Context) -> None:
    """Stop the embedded server (the next command starts it again)."""
    from ragvps.database import stop_embedded

    settings = settings_from(ctx)
    typer.echo("stopped" if stop_embedded(settings) else f"no embedded server runs in {settings.pg_dir}")


def main() -> None:
    app(prog_name="ragvps")

"""`ragvps source add|list|remove` (connected sources: git, web, s3) and `ragvps sync`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ragvps.cli.common import Bars, KbOption, counted, echo_json, open_app, settings_from, skipped_text, warn
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.app.sources import SyncReport

source = typer.Typer(
    help="Connected sources: a git repository, a web site, an S3 bucket, kept in sync by `ragvps sync`.",
    no_args_is_help=True,
)


@source.command("add")
def source_add(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="git | web | s3")],
    name: Annotated[str, typer.Argument(help="The source's name (lower-case letters, digits, - and _).")],
    location: Annotated[
        str,
        typer.Argument(
            help="git: the repository's URL or path; web: the start page's or the sitemap's URL; s3: the bucket."
        ),
    ],
    branch: Annotated[str | None, typer.Option(help="git: the branch (default main).")] = None,
    include: Annotated[list[str] | None, typer.Option(help="git: only paths matching this glob (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="git: not paths matching this glob (repeatable).")] = None,
    link: Annotated[str | None, typer.Option(help="git: a file's URL, with {commit} and {path}.")] = None,
    max_pages: Annotated[int | None, typer.Option(help="web: pages read at most (default 1000).")] = None,
    max_depth: Annotated[int | None, typer.Option(help="web: links followed from the start page (default 3).")] = None,
    prefix: Annotated[str | None, typer.Option(help="s3: only keys under this prefix.")] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="s3: the S3 API's URL (default: AWS_ENDPOINT_URL, or AWS's for the region).")
    ] = None,
    region: Annotated[str | None, typer.Option(help="s3: the region (default: AWS_REGION, or us-east-1).")] = None,
    profile: Annotated[
        str | None, typer.Option(help="s3: credentials by name from the server's source_credentials_file.")
    ] = None,
    max_items: Annotated[int | None, typer.Option(help="Items read at most (default 10000).")] = None,
    kb: KbOption = None,
) -> None:
    """Connect a source to the knowledge base; `ragvps sync` reads it."""
    from ragvps.app.sources import (  # lazy: the use case loads when the command runs (--help start-up)
        SourceSpec,
        add_source,
    )

    options = {
        "branch": branch,
        "include": include,
        "exclude": exclude,
        "link": link,
        "max_pages": max_pages,
        "max_depth": max_depth,
        "prefix": prefix,
        "endpoint": endpoint,
        "region": region,
        "profile": profile,
        "max_items": max_items,
    }
    with open_app(ctx, kb=kb) as app:
        added = add_source(app, SourceSpec(kind, name, location, options))
    typer.echo(f"added {added.kind} source {added.name} ({added.location}); run `ragvps sync {added.name}`")


@source.command("list")
def source_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    kb: KbOption = None,
) -> None:
    """The knowledge base's sources: items, last sync, its outcome."""
    from ragvps.app.sources import list_sources  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb) as app:
        rows = list_sources(app)
    if as_json:
        return echo_json(rows)
    if not rows:
        typer.echo("no sources; add one with `ragvps source add git|web|s3 NAME LOCATION`")
    for r in rows:
        last = f"synced {r.synced_at:%Y-%m-%d %H:%M} in {r.seconds or 0:.1f} s" if r.synced_at else "never synced"
        typer.echo(
            f"{r.name} ({r.kind}) {r.location}: {counted(r.items, 'item')}, {last}, {r.state}"
            + (f": {r.error}" if r.error else "")
        )


@source.command("remove")
def source_remove(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="The source's name.")], kb: KbOption = None
) -> None:
    """Disconnect a source: its documents are deleted from the knowledge base."""
    from ragvps.app.sources import remove_source  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb) as app:
        removed = remove_source(app, name)
    typer.echo(f"removed source {removed.name} and its {counted(removed.documents, 'document')}")


def sync(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Sources to sync (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
    every: Annotated[bool, typer.Option("--all", help="Every knowledge base's sources.")] = False,
    kb: KbOption = None,
) -> None:
    """Bring the knowledge base in line with its sources; only what changed is read. Each sync is a job (GET
    /jobs/ID shows it); one a worker runs already is waited for. Exit 1 if one failed or was cancelled."""
    from ragvps.app.sources import (  # lazy: the use case loads when the command runs (--help start-up)
        sync_every_kb,
        sync_sources,
    )

    if every and (kb or names):
        raise UsageError("give --all, or --kb and source names, not both")
    if every:
        with Bars() as bars:
            reports = sync_every_kb(settings_from(ctx), bars, warn)
    else:
        with open_app(ctx, kb=kb) as app, Bars() as bars:
            reports = sync_sources(app, names or [], bars, warn)
    if as_json:
        echo_json(reports)
    elif not reports:
        typer.echo("no sources to sync: add one with `ragvps source add git|web|s3 NAME LOCATION`")
    for r in [] if as_json else reports:
        typer.echo(summary(r))
    if any(r.state in ("failed", "cancelled") for r in reports):
        raise typer.Exit(1)


def summary(r: SyncReport) -> str:
    name = f"{r.kb}/{r.name}" if r.kb and r.kb != "default" else r.name
    if r.state in ("failed", "cancelled"):
        return f"{name}: {r.state} after {r.seconds:.1f} s: {r.error}"
    done = (
        f"stored {r.documents_stored} documents, deleted {r.documents_deleted}, embedded {r.chunks_embedded} chunks"
        if r.ingested
        else "nothing changed"
    )
    return (
        f"{name}: {counted(r.items, 'item')}, read {r.read}, unchanged {r.unchanged}, deleted {r.deleted}; {done}; "
        f"{r.seconds:.1f} s" + (f"; skipped {skipped_text(r.skipped)}" if r.skipped else "")
    )


def register(app: typer.Typer) -> None:
    app.add_typer(source, name="source")
    app.command("sync")(sync)

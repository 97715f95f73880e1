"""`ragvps export`, `import`, `backup` and `restore-check`: knowledge bases as bundles (docs/bundle.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragvps.cli.common import Bars, KbOption, echo_json, err, open_app, settings_from, warn

if TYPE_CHECKING:
    from ragvps.app.restore import CheckReport


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def export(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The bundle to write (a new file).")],
    kb: KbOption = None,
    with_cache: Annotated[bool, typer.Option("--with-cache", help="Include the cached answers.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Write one knowledge base (documents, chunks, vectors, settings, gold questions) into a portable bundle,
    from one consistent snapshot, while the server goes on serving and ingesting."""
    from ragvps.app import bundles  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb) as app, Bars() as bars:
        made = bundles.export(app, file, with_cache=with_cache, progress=bars, warn=warn)
    if as_json:
        return echo_json({k: v for k, v in vars(made).items() if k != "manifest"})
    typer.echo(
        f"exported {made.documents:,} documents, {made.chunks:,} chunks, {made.vectors:,} vectors "
        f"({made.vector_sets} vector set(s)) to {made.path} ({_mib(made.bytes)})"
    )
    return None


def import_(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A bundle made by `ragvps export` or `ragvps backup`.")],
    kb: Annotated[
        str | None, typer.Option("--kb", help="The new knowledge base's name (default: the bundle's).")
    ] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a knowledge base of that name.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Load a bundle as a knowledge base without embedding anything; every check runs before anything is written,
    and the knowledge base appears whole at the end (a killed import leaves none: run it again)."""
    from ragvps.app import bundles  # lazy: the use case loads when the command runs (--help start-up)

    with Bars() as bars:
        done = bundles.import_(settings_from(ctx), file, kb, replace=replace, progress=bars, warn=warn)
    if as_json:
        return echo_json(done)
    if done.already:
        typer.echo(f"{file} was imported as {done.name} already: nothing to do (--replace imports it again)")
        return None
    index = "HNSW index built" if done.index_built else "no HNSW index (exact search at this size)"
    typer.echo(
        f"imported {done.documents:,} documents, {done.chunks:,} chunks, {done.vectors:,} vectors as "
        f"knowledge base {done.name}; {index}; nothing re-embedded" + (" (resumed)" if done.resumed else "")
    )
    return None


def backup(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="Where the dated bundles go (NAME-YYYYMMDDTHHMMSSZ.ragvps).")],
    kb: KbOption = None,
    every: Annotated[bool, typer.Option("--all", help="Every knowledge base.")] = False,
    keep: Annotated[int | None, typer.Option(help="Keep the N newest bundles of each; delete older ones.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Then restore-check each new bundle.")] = False,
) -> None:
    """Dated bundles of one or every knowledge base; with --check each is proven by a restore."""
    from ragvps.app import bundles  # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.restore import restore_check

    settings = settings_from(ctx)
    failed = 0
    with Bars() as bars:
        made = bundles.backup(settings, folder, bundles.backup_names(settings, kb, every), keep, bars, warn)
    for b in made:
        typer.echo(
            f"backed up {b.kb}: {b.chunks:,} chunks to {b.path} ({_mib(b.bytes)})"
            + (f"; deleted {len(b.pruned)} older" if b.pruned else "")
        )
        if check:
            with Bars() as bars:
                report = restore_check(settings, b.path, bars, warn)
            _print_check(report)
            failed += not report.passed
    if failed:
        raise typer.Exit(1)


def restore_check(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Argument(help="The bundle to prove.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Import a bundle into a scratch knowledge base, run its gold questions (or its probe) and compare with the
    figures recorded at backup time; pass or fail, then the scratch knowledge base is dropped."""
    # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.restore import restore_check as check

    with Bars() as bars:
        report = check(settings_from(ctx), bundle, bars, warn)
    if as_json:
        echo_json(report)
    else:
        _print_check(report)
    if not report.passed:
        raise typer.Exit(1)


def _print_check(report: CheckReport) -> None:
    verdict = "PASS" if report.passed else "FAIL"
    typer.echo(f"restore-check {verdict}: {report.bundle} (knowledge base {report.kb}, checked by {report.method})")
    for line in report.figures:
        typer.echo(f"  {line}")
    for line in report.failures:
        err.print(f"[red]fail:[/red] {line}")


def register(app: typer.Typer) -> None:
    app.command()(export)
    app.command("import")(import_)
    app.command()(backup)
    app.command("restore-check")(restore_check)

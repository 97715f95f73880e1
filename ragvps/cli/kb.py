"""`ragvps kb` (create, list, rename, drop knowledge bases) and `ragvps key` (API keys scoped to them)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from ragvps.cli.common import echo_json, err, settings_from
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.app.library import Library

kb = typer.Typer(help="Knowledge bases: each its own documents, index, model and settings.", no_args_is_help=True)
key = typer.Typer(help="API keys with a role (read, write, admin) on knowledge bases.", no_args_is_help=True)


@contextmanager
def open_library(ctx: typer.Context) -> Iterator[Library]:
    from ragvps.app.library import Library  # lazy: the use case loads when the command runs (--help start-up)

    with Library.open(settings_from(ctx)) as library:
        yield library


@kb.command("create")
def kb_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Lower-case letters, digits and '-', at most 63.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Its embedding model (an Ollama model, or the local "
            "model's name); default: the setting embed_model/embedder."
        ),
    ] = None,
    vector_type: Annotated[str | None, typer.Option(help="vector | halfvec | bit (default: the setting).")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk (default: the model's).")] = None,
) -> None:
    """Make an empty knowledge base (a schema of its own); ingest into it with --kb NAME."""
    from ragvps.app.kbs import kept_settings  # lazy: the use case loads when the command runs (--help start-up)

    with open_library(ctx) as library:
        made = library.create(name, kept_settings(model, vector_type, chunk_size))
    pinned = ", ".join(f"{k}={v}" for k, v in made.settings.items()) or "the global settings"
    typer.echo(f"created knowledge base {made.name} (schema {made.schema}; {pinned})")


@kb.command("list")
def kb_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Every knowledge base: documents, chunks, model, index size, last ingest."""
    with open_library(ctx) as library:
        rows = library.listing()
    if as_json:
        return echo_json(rows)
    typer.echo(f"{'name':<24} {'documents':>9} {'chunks':>9}  {'model':<28} {'index':>10}  last ingest")
    for r in rows:
        model = f"{r.model} ({r.vector_type})" if r.model else "-"
        last = r.last_ingest.strftime("%Y-%m-%d %H:%M") if r.last_ingest else "never"
        typer.echo(
            f"{r.name:<24} {r.documents:>9,} {r.chunks:>9,}  {model:<28} {r.index_bytes / 2**20:>8.1f}MB  {last}"
        )
    return None


@kb.command("drop")
def kb_drop(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The knowledge base to drop, with everything in it.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Drop a knowledge base: its documents, chunks, vectors, index, cached answers and stage files."""
    if not yes:
        if not typer.get_text_stream("stdin").isatty():
            raise UsageError(f"dropping {name!r} deletes all of it: confirm with --yes")
        what = " (it is made again, empty)" if name == "default" else ""
        if not typer.confirm(f"Drop knowledge base {name!r} and everything in it{what}?", default=False):
            raise typer.Exit(1)
    with open_library(ctx) as library:
        library.drop(name)
    typer.echo(f"dropped {name}" + (" (made again, empty)" if name == "default" else ""))


@kb.command("rename")
def kb_rename(ctx: typer.Context, old: Annotated[str, typer.Argument()], new: Annotated[str, typer.Argument()]) -> None:
    """Rename a knowledge base (its keys follow it)."""
    with open_library(ctx) as library:
        library.rename(old, new)
    typer.echo(f"renamed {old} to {new}")


@key.command("create")
def key_create(
    ctx: typer.Context,
    kb_names: Annotated[
        list[str] | None, typer.Option("--kb", help="A knowledge base the key may use; repeatable.")
    ] = None,
    role: Annotated[str, typer.Option(help="read (search, ask, chat) | write (also documents) | admin.")] = "read",
    name: Annotated[str | None, typer.Option(help="A name to list and revoke it by (default: generated).")] = None,
    all_kbs: Annotated[
        bool,
        typer.Option(
            "--all-kbs", help="The role on every knowledge base, present and future (instead of naming each with --kb)."
        ),
    ] = False,
) -> None:
    """Make an API key and print it once; only its hash is kept."""
    name = name or f"key-{secrets.token_hex(3)}"
    kb_names = kb_names or []
    with open_library(ctx) as library:
        made = library.keys().create(name, [(k, role) for k in kb_names], role if all_kbs else None)
    where = "every knowledge base, present and future" if all_kbs else ", ".join(kb_names)
    err.print(f"key {name}: {role} on {where}; shown once, keep it now:")
    typer.echo(made)


@key.command("list")
def key_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Keys by name with their roles, when made and last used (never the key)."""
    with open_library(ctx) as library:
        rows = library.keys().listing()
    if as_json:
        return echo_json(rows)
    for r in rows:
        used = r.last_used_at.strftime("%Y-%m-%d %H:%M") if r.last_used_at else "never"
        typer.echo(f"{r.name:<24} {', '.join(r.grants) or '-':<40} made {r.created_at:%Y-%m-%d %H:%M}, used {used}")
    return None


@key.command("revoke")
def key_revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The key's name (ragvps key list).")],
    yes: Annotated[bool, typer.Option("--yes", help="Also the last admin key.")] = False,
) -> None:
    """Revoke a key; a running server refuses it within seconds."""
    with open_library(ctx) as library:
        library.keys().revoke(name, force=yes)
    typer.echo(f"revoked {name}")


def register(app: typer.Typer) -> None:
    app.add_typer(kb, name="kb")
    app.add_typer(key, name="key")

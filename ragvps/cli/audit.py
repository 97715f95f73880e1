"""`ragvps audit` (who searched, asked, uploaded or deleted what, when) and `ragvps users` (who signed in)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

import typer

from ragvps.cli.common import echo_json, settings_from
from ragvps.errors import UsageError

_SPAN = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def span(text: str) -> timedelta:
    """`30m`, `12h`, `7d`, `2w` as a timedelta."""
    match = _SPAN.match(text)
    if match is None:
        raise UsageError(f"--since {text!r} is not a span: write it like 30m, 12h, 7d or 2w")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def check_action(action: str | None) -> None:
    """An action the audit log writes, or a UsageError listing them (a typo would print an empty table)."""
    # lazy: the server's list of audited routes, only when --action is given
    from ragvps.serve.gate.audit_log import ACTIONS

    known = sorted(set(ACTIONS.values()))
    if action is not None and action not in known:
        raise UsageError(f"--action {action!r} is not one the audit log records; it records: {', '.join(known)}")


def audit(
    ctx: typer.Context,
    since: Annotated[str, typer.Option(help="How far back: 30m, 12h, 7d, 2w.")] = "1d",
    who: Annotated[
        str | None, typer.Option(help="Only rows whose `who` contains this (a key's or a user's name).")
    ] = None,
    kb: Annotated[str | None, typer.Option("--kb", help="Only this knowledge base.")] = None,
    action: Annotated[
        str | None,
        typer.Option(
            help="Only this action: search, ask, chat, upload, delete, cancel, source_add, sync, source_remove, mcp."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows, newest first.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Who searched, asked, chatted, uploaded or deleted in which knowledge base, and when (kept audit_days days;
    the question only with log_questions)."""
    from ragvps.app.library import Library  # lazy: the use case loads when the command runs (--help start-up)

    settings = settings_from(ctx)
    check_action(action)
    with Library.open(settings) as library:
        rows = library.audit().query(span(since), who, kb, action, limit)
        if kb is not None and not rows and kb not in (names := sorted(library.catalog())):
            raise UsageError(f"--kb {kb!r}: there is no such knowledge base (they are: {', '.join(names)})")
    if as_json:
        return echo_json(rows)
    typer.echo(f"{'when (UTC)':<19}  {'who':<36} {'action':<7} {'kb':<20} {'status':>6}  request")
    for r in rows:
        typer.echo(
            f"{r.at:%Y-%m-%d %H:%M:%S}  {shown(r.who)[:36]:<36} {shown(r.action):<7} {shown(r.kb or '-')[:20]:<20} "
            f"{r.status:>6}  {shown(r.request or '-')}" + (f"  {r.question!r}" if r.question else "")
        )


def shown(text: str) -> str:
    """`text` with its control characters escaped (`\n` as `\\n`): one row is one line, whatever a name holds."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def users(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The people who signed in (or came through a trusted proxy), with their groups as last seen."""
    from ragvps.app.library import Library  # lazy: the use case loads when the command runs (--help start-up)

    with Library.open(settings_from(ctx)) as library:
        rows = library.identities().listing()
    if as_json:
        return echo_json(rows)
    if not rows:
        typer.echo("nobody yet: people appear here once they sign in, come through a trusted proxy or are forwarded")
    for r in rows:
        typer.echo(
            f"{shown(r.email or r.name or r.subject):<40} {shown(r.via):<6} {r.seen_at:%Y-%m-%d %H:%M}  "
            f"groups: {shown(', '.join(r.groups)) or '-'}"
        )


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
    app.command("users")(users)

"""`ragvps server stop`: the embedded PostgreSQL under the data directory."""

from __future__ import annotations

import typer

from ragvps.cli.common import settings_from

server = typer.Typer(help="The embedded PostgreSQL server under the data directory.", no_args_is_help=True)


@server.command("stop")
def server_stop(ctx: typer.Context) -> None:
    """Stop the embedded server (the next command starts it again)."""
    from ragvps.app.library import stop_embedded  # lazy: the use case loads when the command runs (--help start-up)

    settings = settings_from(ctx)
    typer.echo("stopped" if stop_embedded(settings) else f"no embedded server runs in {settings.database.pg_dir}")


def register(app: typer.Typer) -> None:
    app.add_typer(server, name="server")

"""`ragvps worker`: embed the chunks `ragvps ingest --defer-embedding` queued, on this machine."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any

import typer

from ragvps.cli.common import Bars, KbOption, echo_json, err, open_app, warn

JobsOption = Annotated[
    bool,
    typer.Option(
        "--jobs",
        help="Run jobs (uploads: POST /kb/NAME/documents; syncs of connected sources) instead of embedding queued "
        "chunks; needs the server's data_dir (a shared volume) for the uploaded files.",
    ),
]
BelowServerOption = Annotated[
    bool,
    typer.Option(
        "--below-server",
        help="With --jobs: start at this priority, then go below it (SCHED_BATCH, nice 5) before a second job or a "
        "first upload over 256 KB, as `ragvps serve` starts its workers: a note is stored at once, the rest yields "
        "to searches.",
    ),
]


def worker(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option(help="This worker's name in `ragvps stats` (default: host:pid).")] = None,
    exit_when_empty: Annotated[
        bool, typer.Option("--exit-when-empty", help="Exit 0 once the queue is empty (batch jobs).")
    ] = False,
    lease: Annotated[
        int | None, typer.Option(help="Seconds a claimed batch is this worker's (setting worker_lease).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    kb: KbOption = None,
    jobs: JobsOption = False,
    linger: Annotated[
        float,
        typer.Option(help="With --jobs --exit-when-empty: wait this many seconds for another job before exiting."),
    ] = 0.0,
    below_server: BelowServerOption = False,
) -> None:
    """Embed queued chunks until stopped: Ctrl-C or SIGTERM finishes the batch in hand; a second Ctrl-C gives
    it back to the queue at once. Point RAGVPS_DATABASE_URL at the shared database and configure the same
    embedding model as the ingest (its own Ollama, or the local model)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        err.print("stopping after this batch (Ctrl-C again to give it back to the queue now)")
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    if jobs:
        try:
            return _jobs(ctx, kb, lease, name, exit_when_empty, linger, stop, as_json, below_server)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    try:
        with open_app(ctx, kb=kb, worker_lease=lease) as app, Bars() as bars:
            report = app.work(name=name, exit_when_empty=exit_when_empty, stop=stop, progress=bars, warn=warn)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if as_json:
        return echo_json(report)
    typer.echo(
        f"worker {report.worker}: embedded {report.embedded} chunks in {report.batches} batches "
        f"({report.model or 'no embedding set yet'})"
        + (f"; {report.lost} finished first by another worker (lease ran out)" if report.lost else "")
        + ("; built the vector index" if report.index_built else "")
        + ("; the queue is empty" if report.stopped == "empty" else "")
    )


def _jobs(
    ctx: typer.Context,
    kb: str | None,
    lease: int | None,
    name: str | None,
    exit_when_empty: bool,
    linger: float,
    stop: threading.Event,
    as_json: bool,
    below_server: bool,
) -> None:
    from ragvps.app.documents import run_jobs  # lazy: the use case loads when the command runs (--help start-up)

    with open_app(ctx, kb=kb, worker_lease=lease, pooled=True) as app:
        report = run_jobs(app, name, stop, exit_when_empty=exit_when_empty, linger=linger, below_server=below_server)
    if as_json:
        return echo_json(report)
    typer.echo(
        f"worker {report.worker}: ended {report.jobs} jobs (uploads and syncs), {report.files} files"
        + ("; no job is left" if report.stopped == "empty" else "")
    )


def register(app: typer.Typer) -> None:
    app.command()(worker)

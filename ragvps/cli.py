"""The command line: builds the settings once, runs a stage, prints for people (or --json for machines)."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ragvps.config import Settings, load_settings
from ragvps.errors import RagvpsError, redact

err = Console(stderr=True, highlight=False, soft_wrap=True)


class _Group(TyperGroup):
    """Turns every RagvpsError into one line on stderr and its exit code; tracebacks only with --verbose."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RagvpsError as exc:
            _fail(ctx, exc, exc.exit_code)
        except KeyboardInterrupt:
            err.print("interrupted: finished work is saved; run the same command again to resume")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `ragvps query ... | head`: the reader left, nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except Exception as exc:
            if _is_click_control_flow(exc):
                raise
            _fail(ctx, exc, 1, prefix="unexpected error (run with --verbose for the traceback): ")


def _is_click_control_flow(exc: Exception) -> bool:
    """Usage errors, --help and aborts: click's (or the copy of click that typer bundles) to handle."""
    return type(exc).__module__.startswith(("click.", "typer."))


def _fail(ctx: Any, exc: BaseException, code: int, prefix: str = "") -> None:
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
    from ragvps.embed.models import spec_for
    from ragvps.embed.registry import make_embedder
    from ragvps.ingest.pipeline import ingest as run_ingest

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
    path_prefix: Annotated[str, typer.Option(help="Only chunks from source files whose path starts so.")] = "",
    meta: Annotated[list[str] | None, typer.Option(
        help="Only chunks whose document or chunk metadata has KEY=VALUE (VALUE as JSON, else text); repeatable.",
    )] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the hits as JSON.")] = False,
) -> None:
    """Hybrid search: vector top-40 and BM25 full-text top-40, fused by reciprocal rank fusion."""
    from ragvps.db.database import connect
    from ragvps.embed import embed_queries
    from ragvps.embed.registry import make_embedder
    from ragvps.errors import UsageError
    from ragvps.retrieve.search import MODES, Filters, check_query, search

    if mode not in MODES:
        raise UsageError(f"--mode {mode!r} is not one of: {', '.join(MODES)}")
    filters = Filters(path_prefix, _metadata_pairs(meta or []))
    settings = settings_from(ctx, top_k=k)
    text = check_query(text)
    with connect(settings) as conn:
        eset = _need_set(conn, settings, "query")
        embedding = embed_queries(make_embedder(settings), [text])[0] if mode != "keyword" else None
        hits = search(conn, eset, text, embedding, settings, mode, filters=filters)
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


def _metadata_pairs(pairs: list[str]) -> dict[str, Any]:
    from ragvps.errors import UsageError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta {pair!r} is not KEY=VALUE (e.g. --meta lang=en)")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@app.command()
def reindex(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Nightly job: re-sync every ingested folder and rebuild the vector index.

    With another embedding model configured, first re-embed the stored chunks with it and switch over
    when done; queries keep using the old vectors until then.
    """
    from ragvps.embed.models import spec_for
    from ragvps.embed.registry import make_embedder
    from ragvps.ingest.pipeline import reindex as run_reindex

    settings = settings_from(ctx)
    with _Bars() as bars:
        result = run_reindex(settings, spec_for(settings), lambda: make_embedder(settings), bars, _warn)
    if as_json:
        roots = {root: asdict(r) | {"skipped": dict(r.skipped)} for root, r in result.roots.items()}
        typer.echo(json.dumps({"switch": asdict(result.switch) if result.switch else None, "roots": roots},
                              indent=2))
        return
    if result.switch:
        s = result.switch
        typer.echo(f"switched from {s.old_model} to {s.new_model}: {s.chunks} chunks, embedded {s.embedded} "
                   f"(the rest from the vector cache), no source re-read")
    for root, report in result.roots.items():
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

    from ragvps.embed.models import input_room, spec_for
    from ragvps.ingest import sources
    from ragvps.ingest.pipeline import IngestReport, chunk_stage, chunker_config

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
    limit = input_room(config.max_tokens, config.prefix)
    summary: dict[str, Any] = {
        "files": len(files), "documents": sum(len(f.documents) for f in files), "chunks": len(counts),
        "rechunked_files": report.rechunked_files, "mode": config.mode, "chunk_size": config.size,
        "chunk_overlap": config.overlap, "model": spec.name, "max_tokens": config.max_tokens,
        "tokens": {"min": counts[0], "median": statistics.median(counts), "max": counts[-1],
                   "total": sum(counts), "over_limit": sum(n > limit for n in counts)} if counts else None,
        "llm_tokens": sum(c.llm_tokens for f in files for c in f.chunks),
        "skipped": dict(report.skipped), "chunk_dir": str(settings.database.data_dir / "chunks"),
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


@app.command()
def plan(
    ctx: typer.Context,
    tokens: Annotated[int | None, typer.Option(help="Tokens in the corpus, one continuous stream.")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per window (--path: the model's).")] = None,
    overlap: Annotated[str | None, typer.Option(
        help="Tokens shared by neighbouring windows, or a percentage of the chunk size: 200, 12%.")] = None,
    dims: Annotated[int | None, typer.Option(help="Vector dimensions (--model's, else 384).")] = None,
    bytes_per_dim: Annotated[int, typer.Option(help="4 float32, 2 half, 1 int8.")] = 4,
    model: Annotated[str | None, typer.Option(
        help="A model ragvps knows: takes its dimensions and refuses chunks above its input limit.")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Overlaps and common models.")] = False,
    budget: Annotated[bool, typer.Option("--budget", help="Tokens to embed, then per question.")] = False,
    path: Annotated[Path | None, typer.Option(
        help="Measure a folder: real token counts and the real chunker, per document.")] = None,
    corpus_chunks: Annotated[int | None, typer.Option(help="--budget: chunks in the corpus.")] = None,
    tokens_per_chunk: Annotated[int | None, typer.Option(help="--budget: tokens per chunk.")] = None,
    questions: Annotated[int | None, typer.Option(help="--budget: questions asked.")] = None,
    question_tokens: Annotated[int, typer.Option(help="--budget: tokens per question to embed.")] = 20,
    chunks_per_answer: Annotated[int, typer.Option(help="--budget: chunks sent per answer.")] = 8,
    prompt_tokens: Annotated[int, typer.Option(help="--budget: prompt plus question tokens.")] = 100,
    answer_tokens: Annotated[int, typer.Option(help="--budget: tokens per answer.")] = 400,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Chunk, overlap, vector-size and token-budget arithmetic, before anything is embedded."""
    from ragvps.errors import UsageError
    from ragvps.measure import plan as p

    modes = [name for name, on in (("--compare", compare), ("--budget", budget), ("--path", path)) if on]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} are separate modes: give one at a time")
    if budget:
        needed = {"--corpus-chunks": corpus_chunks, "--tokens-per-chunk": tokens_per_chunk,
                  "--questions": questions}
        if None in needed.values():
            raise UsageError(f"--budget needs {', '.join(k for k, v in needed.items() if v is None)}")
        b = p.Budget(corpus_chunks or 0, tokens_per_chunk or 0, questions or 0, question_tokens,
                     chunks_per_answer, prompt_tokens, answer_tokens)
        return _plan_budget(b, as_json)

    spec = _plan_model(model) if model else None
    if dims is not None and spec is not None and dims != spec.dims:
        raise UsageError(f"--dims {dims} contradicts --model {model}, which has {spec.dims} dimensions")
    if path is not None:
        if tokens is not None:
            raise UsageError("--path measures the documents' tokens: leave out --tokens")
        return _plan_measure(ctx, path, chunk_size, overlap, spec, dims, bytes_per_dim, as_json)
    if tokens is None or chunk_size is None:
        raise UsageError("ragvps plan needs --tokens N and --chunk-size S (or --budget, or --path DIR)")
    if spec is not None:
        _plan_check_limit(chunk_size, spec)
    d = dims or (spec.dims if spec else 384)
    if compare:
        extra = [overlap] if overlap is not None else []
        plans = p.compare_overlaps(tokens, chunk_size, [*p.COMPARE_OVERLAPS, *extra])
        return _plan_compare(plans, d, bytes_per_dim, as_json)

    one = p.WindowPlan(tokens, chunk_size, p.parse_overlap(overlap or "0", chunk_size))
    summary = p.summary(one, d, bytes_per_dim)
    for warning in summary["warnings"]:
        _warn(warning)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    lengths = summary["chunk_lengths"]
    shown = (", ".join(map(str, lengths)) if isinstance(lengths, list)
             else f"{one.size} each, the last {one.last_length}")
    typer.echo(f"{one.tokens:,} tokens, chunk size {one.size}, overlap {one.overlap} "
               f"({100 * one.overlap / one.size:.0f}% of the size): step {one.step}")
    typer.echo(f"chunks            {one.chunks:,} ({shown})")
    typer.echo(f"processed tokens  {one.processed_tokens:,}")
    typer.echo(f"repeated tokens   {one.repeated_tokens:,} (+{one.overhead_pct:.1f}%)")
    typer.echo(f"raw vectors       {p.human_bytes(summary['raw_vector_bytes'])} = {one.chunks:,} vectors"
               f" x {d} dims x {bytes_per_dim} bytes ({p.BYTES_PER_DIM[bytes_per_dim]})")
    for t in p.VECTOR_TYPES:
        typer.echo(f"pgvector {t:<8} {p.pgvector_bytes(d, t):,} bytes per vector, "
                   f"{p.human_bytes(summary['pgvector_column_bytes'][t])} for {one.chunks:,}")
    typer.echo(f"\n{p.strip(one)}\n\n{p.RAW_SIZE_NOTE}")


def _plan_model(name: str) -> Any:
    from ragvps.embed.models import KNOWN_MODELS, model_spec
    from ragvps.errors import UsageError

    spec = model_spec(name)
    if spec is None:
        known = ", ".join(KNOWN_MODELS)
        raise UsageError(f"--model {name!r} is not a model ragvps knows; use one of {known}, or give --dims")
    return spec


def _plan_check_limit(size: int, spec: Any) -> None:
    from ragvps.measure.plan import check_input_limit

    check_input_limit(size, spec.input_room, spec.name)


def _plan_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(highlight=False).print(table)


def _plan_compare(plans: list[Any], dims: int, bytes_per_dim: int, as_json: bool) -> None:
    from ragvps.measure import plan as p

    models = p.common_models()
    for warning in dict.fromkeys(w for one in plans for w in one.warnings()):
        _warn(warning)
    if as_json:
        typer.echo(json.dumps({
            "overlaps": [p.summary(one, dims, bytes_per_dim) for one in plans],
            "models": [{"name": m.name, "dims": m.dims}
                       | {f"{t}_bytes_per_vector": m.bytes_per_vector(t) for t in p.VECTOR_TYPES}
                       | {f"{t}_mib_per_100k": round(m.mib_for(p.PER_100K, t), 1) for t in p.VECTOR_TYPES}
                       for m in models],
        }, indent=2))
        return
    first = plans[0]
    _plan_table(
        f"{first.tokens:,} tokens, chunk size {first.size}, {dims} dims x {bytes_per_dim} bytes",
        ["overlap", "step", "chunks", "processed", "repeated", "overhead", "raw vectors"],
        [[f"{s.overlap} ({100 * s.overlap / s.size:.0f}%)", str(s.step), f"{s.chunks:,}",
          f"{s.processed_tokens:,}", f"{s.repeated_tokens:,}", f"+{s.overhead_pct:.0f}%",
          f"{p.mib(p.raw_vector_bytes(s.chunks, dims, bytes_per_dim)):,.2f} MiB"] for s in plans],
    )
    _plan_table(
        "pgvector column per model (bytes per vector; MiB per 100k vectors, rounded)",
        ["model", "dims", "vector B", "halfvec B", "vector MiB", "halfvec MiB"],
        [[m.name, str(m.dims), *(f"{m.bytes_per_vector(t):,}" for t in p.VECTOR_TYPES),
          *(f"{m.mib_for(p.PER_100K, t):,.0f}" for t in p.VECTOR_TYPES)] for m in models],
    )
    typer.echo(p.RAW_SIZE_NOTE)


def _plan_budget(b: Any, as_json: bool) -> None:
    from ragvps.measure.plan import millions

    if as_json:
        typer.echo(json.dumps(b.as_dict(), indent=2))
        return

    def n(tokens: int) -> str:
        return f"{tokens:,} ({millions(tokens)})"

    totals, ten = b.totals(), 10 * b.questions
    typer.echo(f"embed the corpus once: {b.corpus_chunks:,} chunks x {b.tokens_per_chunk:,} tokens = "
               f"{n(b.corpus_embed_tokens)} tokens")
    typer.echo(f"per question: embedding {b.question_tokens:,}; generation input "
               f"{b.generation_input_per_question:,} ({b.chunks_per_answer} chunks x {b.tokens_per_chunk:,}"
               f" + {b.prompt_tokens:,}); generation output {b.answer_tokens:,}")
    typer.echo(f"for {b.questions:,} questions: embedding {n(totals['embedding'])}; generation input "
               f"{n(totals['generation_input'])}; generation output {n(totals['generation_output'])}")
    typer.echo(f"corpus embedding amortised: {b.amortised():,.0f} tokens per question at {b.questions:,} "
               f"questions, {b.amortised(ten):,.0f} at {ten:,}")


def _plan_measure(ctx: typer.Context, path: Path, chunk_size: int | None, overlap: str | None, spec: Any,
                  dims: int | None, bytes_per_dim: int, as_json: bool) -> None:
    from ragvps.embed.models import spec_for
    from ragvps.errors import UsageError
    from ragvps.ingest import sources
    from ragvps.ingest.pipeline import chunker_config
    from ragvps.measure.plan import VECTOR_TYPES, measure, parse_overlap, pgvector_bytes, raw_vector_bytes

    settings = settings_from(ctx)
    spec = spec or spec_for(settings)
    size = chunk_size or settings.chunk.size or spec.chunk_size
    settings = settings_from(ctx, chunk_size=size,
                             chunk_overlap=None if overlap is None else parse_overlap(overlap, size))
    config = chunker_config(settings, spec)
    _plan_check_limit(config.size, spec)
    scan = sources.scan(path)
    for warning in scan.warnings:
        _warn(warning)
    docs = [doc for source in scan.files for doc in sources.load(source, _warn)]
    if not docs:
        raise UsageError(f"{path} has no documents ragvps can read; supported: .md, .markdown, .txt")
    m = measure(docs, config)
    for warning in m.stream.warnings():
        _warn(warning)
    d = dims or spec.dims
    if as_json:
        typer.echo(json.dumps(m.as_dict() | {
            "model": spec.name, "dims": d, "chunk_mode": config.mode,
            "raw_vector_bytes": raw_vector_bytes(m.chunks, d, bytes_per_dim),
            "pgvector_column_bytes": {t: m.chunks * pgvector_bytes(d, t) for t in VECTOR_TYPES},
        }, indent=2))
        return
    stream = m.stream
    _plan_table(
        f"{len(docs):,} documents, {m.tokens:,} tokens ({spec.name}), chunk size {config.size}, "
        f"overlap {config.overlap}, {config.mode} chunker",
        ["", "chunks", "tokens embedded"],
        [["one continuous stream (estimate)", f"{stream.chunks:,}", f"{stream.processed_tokens:,}"],
         ["fixed windows per document", f"{m.window_chunks:,}", f"{m.window_processed:,}"],
         ["the chunker, per document", f"{m.chunks:,}", f"{m.chunk_tokens:,}"]],
    )
    typer.echo(f"document boundaries change the count by {m.chunks - stream.chunks:+,} chunks against the "
               "stream estimate (the chunker's tokens include each chunk's heading)")


@app.command()
def doctor(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Check the embedder before a long run: the model's dimension and context length, and the index's model."""
    from ragvps.measure.doctor import diagnose

    settings = settings_from(ctx)
    def active() -> Any:
        from ragvps.db import store
        from ragvps.db.database import connect

        with connect(settings) as conn:
            return store.active_set(conn)

    report = diagnose(settings, active)
    if as_json:
        typer.echo(json.dumps({k: v for k, v in asdict(report).items() if k != "lines"}, indent=2))
    else:
        for line in report.lines:
            typer.echo(line)
        for problem in report.problems:
            err.print(f"[red]problem:[/red] {escape(problem)}")
    if report.problems:
        raise typer.Exit(1)


def _need_set(conn: Any, settings: Settings, action: str) -> Any:
    from ragvps.db import store
    from ragvps.embed.models import spec_for
    from ragvps.errors import UsageError

    spec = spec_for(settings)
    eset = store.active_set(conn)
    if eset is None:
        raise UsageError("nothing is ingested yet: run `ragvps ingest PATH` first")
    store.check_model(eset, spec, settings.index.vector_type, action)
    return eset


def _embed_questions(settings: Settings, texts: list[str], bars: _Bars) -> Any:
    """All questions embedded up front, in batches, before any search runs."""
    import numpy as np

    from ragvps.embed import embed_queries
    from ragvps.embed.registry import make_embedder

    embedder = make_embedder(settings)
    size = max(settings.embed.batch_size, 64)
    out = []
    for lo in range(0, len(texts), size):
        out.append(embed_queries(embedder, texts[lo:lo + size]))
        bars("embed", min(lo + size, len(texts)), len(texts))
    return np.concatenate(out) if out else np.zeros((0, embedder.spec.dims), dtype=np.float32)


@app.command("eval")
def eval_(
    ctx: typer.Context,
    gold: Annotated[Path | None, typer.Argument(help="Gold file: JSON Lines with question, doc, optional answer.")]
    = None,
    queries: Annotated[Path | None, typer.Option(help="BEIR queries.jsonl (with --qrels).")] = None,
    qrels: Annotated[Path | None, typer.Option(help="BEIR qrels.tsv: query-id, corpus-id, score.")] = None,
    k: Annotated[int, typer.Option("--k", "-k", help="Cut-off for recall, MRR and nDCG.")] = 10,
    modes: Annotated[str, typer.Option(help="Comma-separated search modes to compare.")] = "vector,keyword,hybrid",
    depth: Annotated[int, typer.Option(help="Chunks retrieved per question and mode (the curve's length).")] = 40,
    report: Annotated[Path | None, typer.Option(help="Write a self-contained HTML report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics and per-question ranks as JSON.")] = False,
) -> None:
    """Recall@k, MRR@k and nDCG@k of each search mode over gold questions, side by side."""

    from ragvps.db.database import connect
    from ragvps.errors import UsageError
    from ragvps.measure import evaluate

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    if not chosen or any(m not in evaluate.EVAL_MODES for m in chosen):
        raise UsageError(f"--modes {modes!r}: choose from {', '.join(evaluate.EVAL_MODES)}")
    if k < 1 or depth < 1:
        raise UsageError("--k and --depth must be at least 1")
    if gold is not None and (queries or qrels):
        raise UsageError("give either a gold file or --queries with --qrels, not both")
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        _warn(message)

    if gold is not None:
        questions, source = evaluate.load_gold(gold), str(gold)
    elif queries is not None and qrels is not None:
        questions, source = evaluate.load_beir(queries, qrels, warn), f"{queries} + {qrels}"
    else:
        raise UsageError("give a gold file (`ragvps eval gold.jsonl`) or BEIR data (`--queries Q.jsonl --qrels Q.tsv`)")
    depth = max(depth, k)
    settings = settings_from(ctx)
    if depth > settings.search.candidates:  # each leg must return enough chunks for the curve
        settings = settings.replace(candidates=depth)
    with connect(settings) as conn:
        eset = _need_set(conn, settings, "evaluate")
        missing = evaluate.missing_documents(questions, evaluate.known_documents(conn, questions))
        if missing:
            warn(f"{len(missing)} gold documents are not ingested (e.g. {missing[0]!r}): their questions count as "
                 "misses; `doc` is a path relative to the ingested folder (or a BEIR _id)")
        with _Bars() as bars:
            embeddings = (_embed_questions(settings, [q.text for q in questions], bars)
                          if any(m != "keyword" for m in chosen) else None)
            ranked = evaluate.retrieve(conn, eset, questions, embeddings, settings, chosen, depth, bars)
    result = evaluate.score(questions, ranked, k, depth)
    result.warnings, result.source = warnings, source
    if report is not None:
        from ragvps.measure.report import render

        report.write_text(render(result, f"ragvps eval: {source}"), encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(evaluate.report_dict(result), indent=2, ensure_ascii=False))
        return
    typer.echo(f"{result.questions} questions from {source}; documents ranked by their best chunk "
               f"in the top {depth} chunks")
    typer.echo(f"{'mode':<8}  {f'recall@{k}':>10}  {f'MRR@{k}':>8}  {f'nDCG@{k}':>8}  {f'no hit (top {depth})':>16}")
    for mode, s in result.modes.items():
        typer.echo(f"{mode:<8}  {s.recall:>10.3f}  {s.mrr:>8.3f}  {s.ndcg:>8.3f}  {s.no_hit:>16}")
    if report is not None:
        err.print(f"report written to {report}")


@app.command("check-index")
def check_index(
    ctx: typer.Context,
    questions: Annotated[Path | None, typer.Option(help="Sample these questions (a gold file or BEIR queries.jsonl) "
                                                     "instead of stored chunk vectors.")] = None,
    sample: Annotated[int, typer.Option(help="How many questions or chunks to sample.")] = 100,
    k: Annotated[int, typer.Option("--k", "-k", help="Compare the top k.")] = 10,
    target: Annotated[float, typer.Option(help="The overlap to reach.")] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """How much of the exact top-k the HNSW index finds at the current ef_search, and the ef_search for --target."""
    import random

    from ragvps.db import store
    from ragvps.db.database import connect
    from ragvps.errors import UsageError
    from ragvps.measure import evaluate, inspect

    if sample < 1 or k < 1 or not 0 < target <= 1:
        raise UsageError("--sample and --k must be at least 1, --target between 0 and 1")
    settings = settings_from(ctx)
    current = max(settings.search.ef_search, settings.search.candidates)  # what the vector leg of `ragvps query` sets
    picked = None
    if questions is not None:
        loaded = evaluate.load_queries(questions)
        picked = random.Random(0).sample(loaded, min(sample, len(loaded)))
    with connect(settings) as conn:
        eset = _need_set(conn, settings, "check the index")
        if not store.index_exists(conn, eset):
            rows = store.chunk_count(conn)
            raise UsageError(
                f"there is no HNSW index: {rows} chunks is below index_min_rows={settings.index.min_rows}, so "
                "every search is exact already (set RAGVPS_INDEX_MIN_ROWS lower and ingest again to build one)")
        if picked is not None:
            with _Bars() as bars:
                vectors = _embed_questions(settings, [q.text for q in picked], bars)
            exclude: list[Any] = [None] * len(picked)
            source = str(questions)
        else:
            vectors, exclude = inspect.sample_vectors(conn, eset, sample)
            source = "chunks"
        result = inspect.check_index(conn, eset, vectors, exclude, k, current, target, source)
    if as_json:
        typer.echo(json.dumps(inspect.as_dict(result), indent=2))
        return
    what = "stored chunk vectors (each without itself)" if source == "chunks" else f"questions from {source}"
    typer.echo(f"HNSW index {result.index} over {result.rows:,} vectors; {result.sample} {what}; "
               f"overlap of the HNSW top-{k} with the exact top-{k}:")
    for ef, value in result.overlap.items():
        typer.echo(f"  ef_search {ef:>4}: {value:.3f}" + ("  <- current" if ef == current else ""))
    if result.ef_search_for_target is None:
        typer.echo(f"no ef_search up to {max(result.overlap)} reaches {target}: rebuild with a larger hnsw_m "
                   "or hnsw_ef_construction")
    else:
        typer.echo(f"ef_search {result.ef_search_for_target} reaches {target}"
                   + ("" if result.ef_search_for_target > current else f" (current {current} is enough)"))


@app.command()
def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print every figure as JSON.")] = False,
) -> None:
    """Rows and sizes of the index beside the machine's memory; warns when the vector index outgrows RAM."""
    from ragvps.db.database import connect
    from ragvps.measure import inspect

    settings = settings_from(ctx)
    with connect(settings) as conn:
        eset = _need_set(conn, settings, "show stats")
        s = inspect.stats(conn, eset, settings)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    mib, rows = inspect.mib, s["rows"]
    typer.echo(f"{rows['documents']:,} documents, {rows['chunks']:,} chunks, {rows['vectors']:,} vectors "
               f"({s['embedding_set']['model']}, {s['embedding_set']['vector_type']}({s['embedding_set']['dims']})) "
               f"from {rows['roots']} ingested folder(s)")
    for name, t in s["tables"].items():
        typer.echo(f"{name}: {mib(t['total_bytes'])} total = heap {mib(t['heap_bytes'])}, "
                   f"TOAST {mib(t['toast_bytes'])}, indexes {mib(t['indexes_bytes'])}")
        for index, i in t["indexes"].items():
            typer.echo(f"    {index} ({i['method']}): {mib(i['bytes'])}")
    v, m, p, d, e = s["vectors"], s["memory"], s["postgres"], s["disk"], s["embedder"]
    typer.echo(f"vectors: plan's raw estimate {mib(v['plan_raw_bytes'])}, measured table "
               f"{mib(v['measured_table_bytes'])} (heap {mib(v['measured_heap_bytes'])})")
    ram = (f"{mib(m['ram_total_bytes'])} total, {mib(m['ram_available_bytes'])} available"
           if m["ram_total_bytes"] is not None else "unknown")
    typer.echo(f"RAM: {ram}; shared_buffers {p['shared_buffers']}, maintenance_work_mem {p['maintenance_work_mem']}")
    free = f", {mib(d['free_bytes'])} free" if d["free_bytes"] is not None else ""
    typer.echo(f"disk for a rebuild: about {mib(d['rebuild_bytes'])}{free}")
    memory = mib(e["memory_bytes"]) if e["memory_bytes"] is not None else "unknown"
    typer.echo(f"embedder {e['kind']} ({e['model']}): {memory} ({e['note']})")
    for w in s["warnings"]:
        _warn(w)


server = typer.Typer(help="The embedded PostgreSQL server under the data directory.", no_args_is_help=True)
app.add_typer(server, name="server")


@server.command("stop")
def server_stop(ctx: typer.Context) -> None:
    """Stop the embedded server (the next command starts it again)."""
    from ragvps.db.database import stop_embedded

    settings = settings_from(ctx)
    typer.echo("stopped" if stop_embedded(settings) else f"no embedded server runs in {settings.database.pg_dir}")


def main() -> None:
    app(prog_name="ragvps")

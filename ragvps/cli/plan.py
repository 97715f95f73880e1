"""`ragvps plan`: chunk, overlap, vector-size and token-budget arithmetic (no database, no model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ragvps.cli.common import echo_json, flag_names, open_app, warn
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.app import planning as p
    from ragvps.app.planning import sizing

BUDGET, SIZING = "--budget: what a corpus and its questions cost", "--chunks: size a VPS"
# `plan --compare` without a corpus: an example one, named in a note.
COMPARE_TOKENS, COMPARE_CHUNK = 1_000_000, 512
# plan's inputs as the library names them -> this command's flags
FLAGS = {
    "tokens": "--tokens",
    "chunk_size": "--chunk-size",
    "overlap": "--overlap",
    "dims": "--dims",
    "bytes_per_dim": "--bytes-per-dim",
    "questions": "--questions",
    "corpus_chunks": "--corpus-chunks",
    "tokens_per_chunk": "--tokens-per-chunk",
    "question_tokens": "--question-tokens",
    "chunks_per_answer": "--chunks-per-answer",
    "prompt_tokens": "--prompt-tokens",
    "answer_tokens": "--answer-tokens",
    "chunks": "--chunks",
    "ram": "--ram",
}


def plan(
    ctx: typer.Context,
    tokens: Annotated[int | None, typer.Option(help="Tokens in the corpus, one continuous stream.")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per window (--path: the model's).")] = None,
    overlap: Annotated[
        str | None,
        typer.Option(help="Tokens shared by neighbouring windows, or a percentage of the chunk size: 200, 12%."),
    ] = None,
    dims: Annotated[
        int | None, typer.Option(help="Vector dimensions (default: --model's, else the embedding model's).")
    ] = None,
    bytes_per_dim: Annotated[int, typer.Option(help="4 float32, 2 half, 1 int8.")] = 4,
    model: Annotated[
        str | None,
        typer.Option(help="A model ragvps knows: takes its dimensions and refuses chunks above its input limit."),
    ] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Overlaps and common models.")] = False,
    budget: Annotated[bool, typer.Option("--budget", help="Tokens to embed, then per question.")] = False,
    path: Annotated[
        str | None, typer.Option(help="Measure a folder: real token counts and the real chunker, per document.")
    ] = None,
    corpus_chunks: Annotated[int | None, typer.Option(rich_help_panel=BUDGET, help="Chunks in the corpus.")] = None,
    tokens_per_chunk: Annotated[int | None, typer.Option(rich_help_panel=BUDGET, help="Tokens per chunk.")] = None,
    questions: Annotated[int | None, typer.Option(rich_help_panel=BUDGET, help="Questions asked.")] = None,
    question_tokens: Annotated[int, typer.Option(rich_help_panel=BUDGET, help="Tokens per question to embed.")] = 20,
    chunks_per_answer: Annotated[int, typer.Option(rich_help_panel=BUDGET, help="Chunks sent per answer.")] = 8,
    prompt_tokens: Annotated[int, typer.Option(rich_help_panel=BUDGET, help="Prompt plus question tokens.")] = 100,
    answer_tokens: Annotated[int, typer.Option(rich_help_panel=BUDGET, help="Tokens per answer.")] = 400,
    chunks: Annotated[
        int | None,
        typer.Option(help="Size a VPS for N chunks: disk, index RAM, build time and latency from the measured curve."),
    ] = None,
    ram: Annotated[str, typer.Option(rich_help_panel=SIZING, help="The machine's RAM, e.g. 4GB.")] = "4GB",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Chunk, overlap, vector-size and token-budget arithmetic, before anything is embedded."""
    with flag_names(FLAGS):
        if chunks is not None:
            return _plan_sizing(chunks, dims or _model_dims(model), ram, as_json)
        if dims is not None and dims < 1:
            raise UsageError(f"--dims {dims} must be at least 1")
        modes = [name for name, on in (("--compare", compare), ("--budget", budget), ("--path", path)) if on]
        if len(modes) > 1:
            raise UsageError(f"{' and '.join(modes)} are separate modes: give one at a time")
        if budget:
            return _plan_budget(
                _budget(
                    corpus_chunks,
                    tokens_per_chunk,
                    questions,
                    question_tokens,
                    chunks_per_answer,
                    prompt_tokens,
                    answer_tokens,
                ),
                as_json,
            )
        _plan(ctx, Windows(tokens, chunk_size, overlap, dims, bytes_per_dim, model, compare, path), as_json)


@dataclass(frozen=True)
class Windows:
    """The window modes' inputs: one plan, --compare, or --path."""

    tokens: int | None
    chunk_size: int | None
    overlap: str | None
    dims: int | None
    bytes_per_dim: int
    model: str | None
    compare: bool
    path: str | None


def _budget(
    corpus_chunks: int | None,
    tokens_per_chunk: int | None,
    questions: int | None,
    question_tokens: int,
    chunks_per_answer: int,
    prompt_tokens: int,
    answer_tokens: int,
) -> p.Budget:
    from ragvps.app import planning as p  # lazy: the use case loads when the command runs (--help start-up)

    needed = {"--corpus-chunks": corpus_chunks, "--tokens-per-chunk": tokens_per_chunk, "--questions": questions}
    if None in needed.values():
        raise UsageError(f"--budget needs {', '.join(k for k, v in needed.items() if v is None)}")
    return p.Budget(
        corpus_chunks or 0,
        tokens_per_chunk or 0,
        questions or 0,
        question_tokens,
        chunks_per_answer,
        prompt_tokens,
        answer_tokens,
    )


def _plan(ctx: typer.Context, w: Windows, as_json: bool) -> None:
    from ragvps.app import planning as p  # lazy: the use case loads when the command runs (--help start-up)

    tokens, chunk_size, overlap, dims, bytes_per_dim, model, compare, path = (
        w.tokens,
        w.chunk_size,
        w.overlap,
        w.dims,
        w.bytes_per_dim,
        w.model,
        w.compare,
        w.path,
    )

    spec = p.known_model(model) if model else None
    if dims is not None and spec is not None and dims != spec.dims:
        raise UsageError(f"--dims {dims} contradicts --model {model}, which has {spec.dims} dimensions")
    if path is not None:
        if tokens is not None:
            raise UsageError("--path measures the documents' tokens: leave out --tokens")
        return _plan_measure(ctx, path, chunk_size, overlap, spec, dims, bytes_per_dim, as_json)
    if compare and (tokens is None or chunk_size is None):  # --compare alone: an example corpus, said so
        tokens = COMPARE_TOKENS if tokens is None else tokens
        chunk_size = (spec.chunk_size if spec else COMPARE_CHUNK) if chunk_size is None else chunk_size
        warn(
            f"comparing for {tokens:,} tokens in chunks of {chunk_size} (give --tokens and --chunk-size for "
            "your own corpus)"
        )
    if tokens is None or chunk_size is None:
        raise UsageError("ragvps plan needs --tokens N and --chunk-size S (or --compare, --budget, or --path DIR)")
    if spec is not None:
        p.check_limit(chunk_size, spec)
    d = dims or (spec.dims if spec else p.default_dims())
    if compare:
        extra = [overlap] if overlap is not None else []
        plans = p.compare_overlaps(tokens, chunk_size, [*p.COMPARE_OVERLAPS, *extra])
        chosen = p.compare_overlaps(tokens, chunk_size, extra)  # only an overlap the user chose is warned about
        return _plan_compare(plans, chosen, d, bytes_per_dim, as_json)

    one = p.WindowPlan(tokens, chunk_size, p.parse_overlap(overlap or "0", chunk_size))
    summary = p.summary(one, d, bytes_per_dim)
    for warning in summary["warnings"]:
        warn(warning)
    if as_json:
        return echo_json(summary)
    _show_one(one, summary, d, bytes_per_dim)


def _show_one(one: p.WindowPlan, summary: dict[str, Any], d: int, bytes_per_dim: int) -> None:
    from ragvps.app import planning as p  # lazy: the use case loads when the command runs (--help start-up)

    lengths = summary["chunk_lengths"]
    shown = (
        ", ".join(map(str, lengths)) if isinstance(lengths, list) else f"{one.size} each, the last {one.last_length}"
    )
    typer.echo(
        f"{one.tokens:,} tokens, chunk size {one.size}, overlap {one.overlap} "
        f"({100 * one.overlap / one.size:.0f}% of the size): step {one.step}"
    )
    typer.echo(f"chunks            {one.chunks:,} ({shown})")
    typer.echo(f"processed tokens  {one.processed_tokens:,}")
    typer.echo(f"repeated tokens   {one.repeated_tokens:,} (+{one.overhead_pct:.1f}%)")
    typer.echo(
        f"raw vectors       {p.human_bytes(summary['raw_vector_bytes'])} = {one.chunks:,} vectors"
        f" x {d} dims x {bytes_per_dim} bytes ({p.BYTES_PER_DIM[bytes_per_dim]})"
    )
    for t in p.VECTOR_TYPES:
        typer.echo(
            f"pgvector {t:<8} {p.pgvector_bytes(d, t):,} bytes per vector, "
            f"{p.human_bytes(summary['pgvector_column_bytes'][t])} for {one.chunks:,}"
        )
    typer.echo(f"\n{p.strip(one)}\n\n{p.RAW_SIZE_NOTE}")


def _plan_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table  # lazy: only `plan` draws a table (3 ms of every command's start-up)

    table = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(highlight=False).print(table)


def _plan_compare(plans: list[Any], chosen: list[Any], dims: int, bytes_per_dim: int, as_json: bool) -> None:
    from ragvps.app import planning as p  # lazy: the use case loads when the command runs (--help start-up)

    models = p.common_models()
    for warning in dict.fromkeys(w for one in chosen for w in one.warnings()):
        warn(warning)
    if as_json:
        return echo_json(
            {
                "overlaps": [p.summary(one, dims, bytes_per_dim) for one in plans],
                "models": [
                    {"name": m.name, "dims": m.dims}
                    | {f"{t}_bytes_per_vector": m.bytes_per_vector(t) for t in p.VECTOR_TYPES}
                    | {f"{t}_mib_per_100k": round(m.mib_for(p.PER_100K, t), 1) for t in p.VECTOR_TYPES}
                    for m in models
                ],
            }
        )
    first = plans[0]
    _plan_table(
        f"{first.tokens:,} tokens, chunk size {first.size}, {dims} dims x {bytes_per_dim} bytes",
        ["overlap", "step", "chunks", "processed", "repeated", "overhead", "raw vectors"],
        [
            [
                f"{s.overlap} ({100 * s.overlap / s.size:.0f}%)",
                str(s.step),
                f"{s.chunks:,}",
                f"{s.processed_tokens:,}",
                f"{s.repeated_tokens:,}",
                f"+{s.overhead_pct:.0f}%",
                f"{p.mib(p.raw_vector_bytes(s.chunks, dims, bytes_per_dim)):,.2f} MiB",
            ]
            for s in plans
        ],
    )
    _plan_table(
        "pgvector column per model (bytes per vector; MiB per 100k vectors, rounded)",
        ["model", "dims", "vector B", "halfvec B", "vector MiB", "halfvec MiB"],
        [
            [
                m.name,
                str(m.dims),
                *(f"{m.bytes_per_vector(t):,}" for t in p.VECTOR_TYPES),
                *(f"{m.mib_for(p.PER_100K, t):,.0f}" for t in p.VECTOR_TYPES),
            ]
            for m in models
        ],
    )
    typer.echo(p.RAW_SIZE_NOTE)


def _plan_budget(b: Any, as_json: bool) -> None:
    from ragvps.app.planning import millions  # lazy: the use case loads when the command runs (--help start-up)

    if as_json:
        return echo_json(b.as_dict())

    def n(tokens: int) -> str:
        return f"{tokens:,} ({millions(tokens)})"

    totals, ten = b.totals(), 10 * b.questions
    typer.echo(
        f"embed the corpus once: {b.corpus_chunks:,} chunks x {b.tokens_per_chunk:,} tokens = "
        f"{n(b.corpus_embed_tokens)} tokens"
    )
    typer.echo(
        f"per question: embedding {b.question_tokens:,}; generation input "
        f"{b.generation_input_per_question:,} ({b.chunks_per_answer} chunks x {b.tokens_per_chunk:,}"
        f" + {b.prompt_tokens:,}); generation output {b.answer_tokens:,}"
    )
    typer.echo(
        f"for {b.questions:,} questions: embedding {n(totals['embedding'])}; generation input "
        f"{n(totals['generation_input'])}; generation output {n(totals['generation_output'])}"
    )
    typer.echo(
        f"corpus embedding amortised: {b.amortised():,.0f} tokens per question at {b.questions:,} "
        f"questions, {b.amortised(ten):,.0f} at {ten:,}"
    )


def _plan_measure(
    ctx: typer.Context,
    path: str,
    chunk_size: int | None,
    overlap: str | None,
    spec: Any,
    dims: int | None,
    bytes_per_dim: int,
    as_json: bool,
) -> None:
    # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.planning import VECTOR_TYPES, pgvector_bytes, raw_vector_bytes

    with open_app(ctx, database=False, chunk_size=chunk_size) as app:
        r = app.plan_measure(path, spec, overlap, dims, bytes_per_dim, warn)
    m, config, d, spec = r.measurement, r.config, r.dims, r.spec
    if as_json:
        return echo_json(
            m.as_dict()
            | {
                "model": spec.name,
                "dims": d,
                "chunk_mode": config.mode,
                "raw_vector_bytes": raw_vector_bytes(m.chunks, d, bytes_per_dim),
                "pgvector_column_bytes": {t: m.chunks * pgvector_bytes(d, t) for t in VECTOR_TYPES},
            }
        )
    stream = m.stream
    _plan_table(
        f"{r.documents:,} documents, {m.tokens:,} tokens ({spec.name}), chunk size {config.size}, "
        f"overlap {config.overlap}, {config.mode} chunker",
        ["", "chunks", "tokens embedded"],
        [
            ["one continuous stream (estimate)", f"{stream.chunks:,}", f"{stream.processed_tokens:,}"],
            ["fixed windows per document", f"{m.window_chunks:,}", f"{m.window_processed:,}"],
            ["the chunker, per document", f"{m.chunks:,}", f"{m.chunk_tokens:,}"],
        ],
    )
    typer.echo(
        f"document boundaries change the count by {m.chunks - stream.chunks:+,} chunks against the "
        "stream estimate (the chunker's tokens include each chunk's heading)"
    )


def _model_dims(model: str | None) -> int:
    from ragvps.app import planning as p  # lazy: the use case loads when the command runs (--help start-up)

    return p.known_model(model).dims if model else p.default_dims()


def _plan_sizing(chunks: int, dims: int, ram: str, as_json: bool) -> None:
    from ragvps.app.planning import sizing  # lazy: the use case loads when the command runs (--help start-up)

    curve, ram_bytes = sizing.load_curve(), sizing.parse_ram(ram)
    preds = [sizing.predict(curve, chunks, dims, t) for t in sizing.TYPES]
    sizes = {p.vector_type: p.index_bytes for p in preds}
    verdicts = {p.vector_type: sizing.ram_verdict(p.index_bytes, ram_bytes, p.vector_type, sizes) for p in preds}
    if as_json:
        return echo_json(
            {
                "chunks": chunks,
                "dims": dims,
                "ram_bytes": ram_bytes,
                "measured": curve["measured"],
                "predictions": [
                    vars(p) | {"fits": verdicts[p.vector_type][0], "verdict": verdicts[p.vector_type][1]} for p in preds
                ],
            }
        )
    _plan_table(
        f"{chunks:,} chunks of {dims} dims on a {sizing.gib(ram_bytes)} machine",
        ["vector_type", "disk", "HNSW index", "fits in RAM", "build (2 cores)", "hybrid p50 / p95"],
        [
            [
                p.vector_type,
                sizing.gib(p.disk_bytes),
                sizing.gib(p.index_bytes),
                "yes" if verdicts[p.vector_type][0] else "no",
                f"{p.build_s / 60:,.1f} min",
                f"{p.hybrid_p50_ms:.0f} / {p.hybrid_p95_ms:.0f} ms",
            ]
            for p in preds
        ],
    )
    for p in preds:
        typer.echo(f"{p.vector_type}: {verdicts[p.vector_type][1]}")
    for p in preds:
        memory = sizing.gib(p.build_memory_bytes)
        typer.echo(
            f"{p.vector_type}: {_depth_advice(p)}; build with index_memory >= {memory} "
            "(with less the graph outgrows it and the rest is inserted row by row, "
            f"~{sizing.SPILLED_ROWS_PER_S} rows/s measured)"
        )
    if any(p.extrapolated for p in preds):
        typer.echo("beyond the measured sizes: extrapolated with the last segment's exponent")
    typer.echo(f"from: {curve['measured']}")


def _depth_advice(p: sizing.Prediction) -> str:
    from ragvps.app.planning import sizing  # lazy: the use case loads when the command runs (--help start-up)

    if p.depth is not None:
        return (
            f"{p.depth_setting} {p.depth} for top-10 overlap {p.depth_overlap:.2f} with exact search "
            f"(measured at {p.depth_rows:,} chunks)"
        )
    return (
        f"no measured {p.depth_setting} reaches top-10 overlap {sizing.OVERLAP_GOAL} at {p.depth_rows:,} chunks "
        f"(the deepest measured gives {p.depth_overlap:.2f}): raise it beyond that and check with "
        "`ragvps check-index`"
    )


def register(app: typer.Typer) -> None:
    app.command()(plan)

"""`ragvps query`: hybrid search from the command line."""

from __future__ import annotations

from typing import Annotated

import typer

from ragvps.cli.common import (
    KbOption,
    KOption,
    MetaOption,
    ModeOption,
    PathPrefixOption,
    echo_json,
    err,
    flag_names,
    metadata_pairs,
    open_app,
)
from ragvps.config import reranker_on


def query(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The question.")],
    k: KOption = None,
    mode: ModeOption = "hybrid",
    path_prefix: PathPrefixOption = "",
    meta: MetaOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the hits as JSON.")] = False,
    rerank: Annotated[
        bool, typer.Option("--rerank", help="Reorder the top rerank_candidates with the reranker API at reranker_url.")
    ] = False,
    kb: KbOption = None,
) -> None:
    """Hybrid search: vector top-40 and BM25 full-text top-40, fused by reciprocal rank fusion."""
    from ragvps.app import Filters, SearchRequest  # lazy: the use case loads when the command runs (--help start-up)

    request = SearchRequest(text, k=k, mode=mode, filters=Filters(path_prefix, metadata_pairs(meta or [])))  # type: ignore[arg-type]
    with (
        flag_names({"mode": "--mode", "k": "--k"}),
        open_app(ctx, kb=kb, reranker=reranker_on() if rerank else None) as app,
    ):
        result = app.search(request)
    if as_json:
        return echo_json(result.hits)
    if not result.hits:
        err.print("no matching chunks")
    for h in result.hits:
        snippet = " ".join(h.text.split())
        snippet = snippet[:200] + ("..." if len(snippet) > 200 else "")
        typer.echo(f"{h.rank:>2}  {h.score:.4f}  {h.label}" + (f"  [{h.heading_path}]" if h.heading_path else ""))
        typer.echo(f"    {snippet}")


def register(app: typer.Typer) -> None:
    app.command()(query)

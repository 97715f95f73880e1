"""`ragvps calibrate`: the refusal line and the fusion fitted on the knowledge base's own questions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragvps.cli.common import Bars, KbOption, echo_json, open_app


def calibrate(
    ctx: typer.Context,
    questions: Annotated[
        int,
        typer.Option(
            help="Answerable questions to make from the chunks (half as many "
            "unanswerable ones, and the built-in off-topic set)."
        ),
    ] = 200,
    target: Annotated[float, typer.Option(help="The share of answerable questions the line keeps answered.")] = 0.90,
    apply: Annotated[
        bool, typer.Option("--apply", help="Keep the line and the fusion in the knowledge base's settings.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the curve and the choice as JSON.")] = False,
    gold: Annotated[
        Path | None,
        typer.Option(
            help="Gold questions (`ragvps eval`'s JSON Lines: question, doc) "
            "as the answerable ones, instead of questions made from chunks."
        ),
    ] = None,
    queries: Annotated[
        Path | None, typer.Option(help="BEIR queries.jsonl as the answerable ones (with --qrels).")
    ] = None,
    qrels: Annotated[Path | None, typer.Option(help="BEIR qrels.tsv: query-id, corpus-id, score.")] = None,
    kb: KbOption = None,
) -> None:
    """Fit the refusal line (answer_min_evidence) and the fusion (rrf or convex, the vector leg's weight) on
    questions made from the knowledge base itself (or on gold questions), without an LLM; --apply keeps them."""
    from ragvps.app.calibration import Gold  # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app.evaluation import questions_from

    given = None
    if gold is not None or queries is not None or qrels is not None:
        found, source = questions_from(gold, queries, qrels, lambda msg: typer.echo(msg, err=True))
        given = Gold(tuple(found), source)
    with open_app(ctx, kb=kb) as app, Bars() as bars:
        done = app.calibrate(questions, target, apply, bars, given)
    if as_json:
        return echo_json(done.to_json())
    q = done.questions
    made = f"gold questions from {done.gold}" if done.gold else "answerable questions made from its chunks"
    typer.echo(
        f"knowledge base {done.kb}: {q['answerable']} {made}, "
        f"{q['unanswerable']} on topic but held out of retrieval, {q['off_topic']} off topic"
    )
    typer.echo(f"{'line':>5}  {'answered':>8}  {'refused held-out':>16}  {'refused off-topic':>17}")
    shown = {round(x / 100, 2) for x in range(10, 91, 5)} | {done.chosen.line, done.current.line}
    for p in done.curve:
        if p.line in shown:
            mark = "  <- chosen" if p is done.chosen else "  <- in force" if p is done.current else ""
            typer.echo(
                f"{p.line:>5.2f}  {p.answered:>8.2f}  {p.refused_unanswerable:>16.2f}  "
                f"{p.refused_off_topic:>17.2f}{mark}"
            )
    typer.echo(f"fusion: {done.fusion.summary()}")
    typer.echo(f"line chosen: {done.chosen.line:.2f} (the highest that answers {done.target:.0%} of the answerable)")
    typer.echo("kept in the knowledge base's settings" if done.applied else "nothing changed: --apply keeps them")


def register(app: typer.Typer) -> None:
    app.command()(calibrate)

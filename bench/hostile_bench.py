"""Hostile files, names and bundles against a real `ragvps serve` (issue 42). One command, from the repository
root (under the exclusive quiet lock):

    flock -x /work/quiet.lock python bench/hostile_bench.py     # rewrites its section of bench/RESULTS.md

One multipart upload of 100 good Markdown files plus every hostile file case of tests/support/hostile_files.py (bombs by
reuse: EPUB spine, ODT repeated rows, XLSX shared string; a ratio zip bomb; hostile names: over 255 bytes, 300
characters, a file where a folder is, names sent twice, names that try to leave the folder), a symbolic link
planted in the uploads folder, four concurrent 64 MiB JSON bodies (chunked, no Content-Length), and two forged
bundles (a foreign `root`, a manifest that under-counts its chunks). Reported: that every good file is stored and
every hostile case ends as it must, the peak RSS of the server and of its job worker (sampled every 50 ms), and
that nothing was written outside the data directory (every file under the bench's folder and /tmp listed before
and after).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from common import OUT, ROOT
from common.databases import fresh
from common.load import KEY
from common.results import write_section
from support.hostile_files import HOSTILE_NAMES, bundle_members, corpus, extra_chunk, foreign_root
from support.office_files import zip_bomb
from support.serve_server import Server

from ragvps.config import load_settings
from ragvps.db.embedded import embedded_url

WORK = OUT / "hostile"
JSON_MB = 64


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ragvps(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ragvps", *args], env=env, cwd=ROOT, capture_output=True, text=True)
    if ok and done.returncode != 0:
        raise SystemExit(f"ragvps {' '.join(args)} failed: {done.stderr}")
    return done


OWN = ("serve.log", "b.ragvps", "foreign.ragvps", "lying.ragvps")  # what the bench itself writes in WORK


def listing(data: Path) -> set[str]:
    """Every file and link under WORK but the data directory (and the bench's own), every entry of /tmp and /,
    and the files the hostile names aim at elsewhere."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(WORK):
        here = Path(folder)
        dirs[:] = [d for d in dirs if (here / d) not in (data, WORK / "pg-home", WORK / "made")]
        found |= {str(here / f) for f in files if here != WORK or f not in OWN}
        found |= {str(here / d) for d in dirs if (here / d).is_symlink()}
    found |= {
        str(p)
        for top in (Path("/tmp"), Path("/"))
        for p in top.iterdir()
        if "escape" in p.name or p.name.startswith(("coll.md", "good-", "n" * 20, "é"))
    }
    return found | {str(p) for p in (Path("/etc/escape-abs.md"), WORK.parent / "escape-dotdot.md") if p.exists()}


class Peak(threading.Thread):
    """The largest RSS of a process and, apart, of its children, sampled every 50 ms until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.proc, self.done = psutil.Process(pid), threading.Event()
        self.server = self.children = 0

    def run(self) -> None:
        while not self.done.wait(0.05):
            try:
                self.server = max(self.server, self.proc.memory_info().rss)
                kids = sum(c.memory_info().rss for c in self.proc.children(recursive=True))
                self.children = max(self.children, kids)
            except psutil.Error:
                pass


def good_files(n: int) -> list[tuple[str, bytes]]:
    return [
        (
            f"good-{i:03d}.md",
            (
                f"# Good note {i}\n\nNote {i} tells how crate {i} is shelved in aisle {i % 9} "
                f"and checked by the night shift on day {i % 7}.\n"
            ).encode(),
        )
        for i in range(n)
    ]


def hostile_files(folder: Path) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """The hostile files of the upload and what each must end as ("failed", or a kept name's ending)."""
    expected = corpus(folder)
    files = [(name, (folder / name).read_bytes()) for name in expected]
    files.append(("ratio_bomb.docx", zip_bomb(folder / "ratio.docx", "word/document.xml", 64 << 20).read_bytes()))
    want = dict.fromkeys([*expected, "ratio_bomb.docx"], "failed")
    for n, (name, keeps) in enumerate(HOSTILE_NAMES):
        files.append((name, f"# Name {n}\n\nA hostile name, case {n}.\n".encode()))
        want[name] = keeps
    for name in ("../../escape-dotdot.md", "/etc/escape-abs.md", "n" * 300 + ".md", "coll.md"):
        files.append((name, f"# Again\n\n{name[:20]} sent again.\n".encode()))
    return files, want


def json_flood(server: Server) -> list[int]:
    """Four concurrent 64 MiB JSON bodies, chunked (no Content-Length): each answer's status."""

    def body() -> Iterator[bytes]:
        yield b'{"path": "flood.md", "text": "'
        for _ in range(JSON_MB):
            yield b"A" * (1 << 20)
        yield b'"}'

    def one(_: int) -> int:
        with httpx.Client(
            base_url=server.url, headers=server.headers | {"Content-Type": "application/json"}, timeout=120
        ) as c:
            try:
                return c.post("/kb/default/documents", content=body()).status_code
            except httpx.HTTPError:
                return 0  # the server answered 413 and closed while the body was still being sent

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(4)))


def run(args: argparse.Namespace) -> dict[str, object]:
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "outside").mkdir(parents=True)
    (WORK / "outside" / "vault.md").write_text("# Vault\n\nThe outside vault code is plover.\n")
    (WORK / "no-config.toml").touch()
    data = WORK / "data"
    admin = embedded_url(load_settings(env={"RAGVPS_DATA_DIR": str(WORK / "pg-home")}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_DATABASE_URL": fresh(admin, "hostile_bench"),
        "RAGVPS_DATA_DIR": str(data),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(WORK / "no-config.toml"),
    }
    hostile, want = hostile_files(WORK / "made")
    good = good_files(args.good)
    before = listing(data)
    r: dict[str, object] = {"uptime": [subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()]}
    (WORK / "made" / "seed").mkdir()
    (WORK / "made" / "seed" / "seed.md").write_text("# Seed\n\nThe seed note makes the knowledge base.\n")
    ragvps(env, "ingest", str(WORK / "made" / "seed"))
    uploads = data / "kb" / "default" / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    os.symlink(WORK / "outside" / "vault.md", uploads / "planted.md")
    server = Server(env | {"RAGVPS_API_KEYS": KEY}, WORK / "serve.log", key=KEY).start(timeout=300)
    peak = Peak(server.proc.pid if server.proc else 0)
    peak.start()
    try:
        start = time.perf_counter()
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=600) as c:
            sent = c.post("/kb/default/documents", files=[("files", f) for f in good + hostile])
            assert sent.status_code == 202, sent.text
            job = sent.json()["job"]
            while (status := c.get(f"/jobs/{job}").json())["state"] not in ("done", "failed", "cancelled"):
                if time.perf_counter() - start > args.max_seconds:
                    raise SystemExit(f"the job did not end within {args.max_seconds} s: {status}")
                time.sleep(0.25)
        r["job_s"] = time.perf_counter() - start
        r["status"] = status
        r["json"] = json_flood(server)
        time.sleep(1.0)
    finally:
        peak.done.set()
        peak.join()
        server.stop()
    r["server_rss"], r["worker_rss"] = peak.server, peak.children
    r["reindex"] = ragvps(env, "reindex").stderr
    ragvps(env, "export", str(WORK / "b.ragvps"))
    members = bundle_members(WORK / "b.ragvps")
    ragvps(
        env,
        "import",
        str(foreign_root(WORK / "foreign.ragvps", dict(members), str(WORK / "outside"))),
        "--kb",
        "forged",
    )
    r["forged_reindex"] = ragvps(env, "reindex", "--kb", "forged").stderr
    r["lying"] = ragvps(
        env, "import", str(extra_chunk(WORK / "lying.ragvps", dict(members))), "--kb", "lying", ok=False
    )
    r["sources"] = stored(env)
    r["after"] = listing(data) - before
    r |= {"good": [n for n, _ in good], "want": want}
    r["uptime"].append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())  # type: ignore
    # The embedded PostgreSQL the bench started is stopped once this process (which holds it) has exited.
    stop_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    subprocess.Popen(
        [
            "sh",
            "-c",
            f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 0.2; done; {sys.executable} -m ragvps server stop",
        ],
        cwd=ROOT,
        start_new_session=True,
        env=stop_env | {"PYTHONPATH": str(ROOT), "RAGVPS_DATA_DIR": str(WORK / "pg-home")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return r


def stored(env: dict[str, str]) -> dict[str, set[str]]:
    import psycopg

    with psycopg.connect(env["RAGVPS_DATABASE_URL"]) as conn:
        out: dict[str, set[str]] = {}
        for name, schema in conn.execute("SELECT name, schema_name FROM ragvps.knowledge_bases").fetchall():
            rows = conn.execute(f"SELECT root, source FROM {schema}.documents").fetchall()
            out[name] = {f"{root}|{source}" for root, source in rows}
        return out


def check(r: dict) -> list[tuple[str, bool, str]]:
    """Each claim, whether it held, and what was seen."""
    files = {f["name"]: f for f in r["status"]["files"]}
    default = {s.split("|", 1)[1] for s in r["sources"]["default"]}
    good_ok = all(files[n]["state"] == "done" for n in r["good"]) and set(r["good"]) <= default
    bombs = [n for n, w in r["want"].items() if w == "failed"]
    failed_ok = all(files[n]["state"] == "failed" and n not in default for n in bombs)
    names = [f for f in files.values() if f["name"] not in r["good"] and f["name"] not in bombs]
    names_ok = all(
        f["state"] == "done" and all(len(p.encode()) <= 255 for p in f["name"].split("/")) for f in names
    ) and len({f["name"] for f in files.values()}) == len(files)
    forged = r["sources"].get("forged", set())
    return [
        (f"{len(r['good'])} good files stored", good_ok, f"{sum(files[n]['state'] == 'done' for n in r['good'])} done"),
        (
            "every bomb failed by name, nothing of it stored",
            failed_ok,
            "; ".join(f"{n}: {files[n]['error'][:70]}..." for n in bombs),
        ),
        (
            "hostile names stored under safe unique names",
            names_ok,
            ", ".join((f["name"][:12] + "..." + f["name"][-10:]) if len(f["name"]) > 30 else f["name"] for f in names),
        ),
        (
            "the link planted in uploads/ not stored by reindex",
            "planted.md" not in default,
            next((ln.strip() for ln in r["reindex"].splitlines() if "planted.md" in ln), "")[:110],
        ),
        ("4 concurrent 64 MiB JSON bodies refused (413)", all(s in (413, 0) for s in r["json"]), str(r["json"])),
        (
            "a bundle's foreign root never read by reindex",
            all(s.startswith("bundle:") for s in forged) and not any("vault" in s for s in forged),
            f"{len(forged)} documents, roots {sorted({s.split('|')[0] for s in forged})[:1]}",
        ),
        (
            "a re-checksummed bundle that under-counts refused",
            r["lying"].returncode != 0,
            r["lying"].stderr.strip().splitlines()[-1][:120] if r["lying"].stderr.strip() else "",
        ),
        (
            "nothing written outside the data directory",
            not r["after"],
            ", ".join(sorted(r["after"]))[:200]
            or "no new file under bench/out/hostile but data/, none aimed at in /tmp, / or /etc",
        ),
    ]


def report(r: dict, checks: list[tuple[str, bool, str]]) -> str:
    status = r["status"]
    mib = 1 << 20
    return "\n".join(
        [
            "<!-- hostile_bench:start -->",
            "## Hostile files, names and bundles (`python bench/hostile_bench.py`, issue 42)",
            "",
            f"One multipart upload of {len(r['good'])} good Markdown files and {len(status['files']) - len(r['good'])} "
            "hostile ones (tests/support/hostile_files.py's bombs by reuse, a ratio zip bomb, hostile names) to a real "
            "`ragvps serve` (embedded PostgreSQL 18, local MiniLM int8), a symbolic link planted in the uploads "
            "folder, "
            f"four concurrent {JSON_MB} MiB JSON bodies sent chunked, two forged bundles. Job: {status['state']}, "
            f"{status['files_done']} files with an outcome, {status['files_failed']} failed, "
            f"{status['chunks_embedded']:,} chunks embedded, {r['job_s']:.1f} s. `uptime` before: {r['uptime'][0]}; "
            f"after: {r['uptime'][1]}.",
            "",
            "| claim | held | seen |",
            "|---|---|---|",
            *[f"| {claim} | {'yes' if ok else '**NO**'} | {seen.replace('|', '/')} |" for claim, ok, seen in checks],
            "",
            f"Peak RSS, sampled every 50 ms through the upload and the JSON flood: the server "
            f"{r['server_rss'] / mib:.0f} "
            f"MiB, its job worker (with its children) {r['worker_rss'] / mib:.0f} MiB. A JSON body is refused past "
            "upload_max_json_bytes (16 MiB), so the flood cost at most 4 x 16 MiB of body; each bomb failed by the "
            "text bound (max_text_ratio, max_text_chars) before its text was chunked.",
            "<!-- hostile_bench:end -->",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--good", type=int, default=100)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    args = parser.parse_args()
    r = run(args)
    checks = check(r)
    section = report(r, checks)
    print(section)
    if not args.no_write:
        write_section("hostile_bench", section)
    if not all(ok for _, ok, _ in checks):
        raise SystemExit("a claim did not hold: see the table")


if __name__ == "__main__":
    main()

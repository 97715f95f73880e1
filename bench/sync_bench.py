"""Connected sources, synced twice (issue 46): a 1,000-page web site (a start page linking every page, served by a
threaded http.server on 127.0.0.1) and a 1,000-file git repository, each synced into a fresh knowledge base with
the local embedder, then synced again with nothing changed, then once more after one page or file changed.
Goal: the second sync takes under 10% of the first. One command, from the repository root, under the exclusive
bench lock:

    flock -x /work/quiet.lock python bench/sync_bench.py     # rewrites its section of bench/RESULTS.md

Each page is one paragraph of docs/ with its number (so no two pages share a chunk and every one is embedded).
Each sync is one `ragvps sync --json` process; the figures are its wall time and the sync's own seconds.
The embedded PostgreSQL lives under bench/out/sync_bench (made fresh, stopped at the end).
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

from common import OUT, ROOT
from common.results import write_section

WORK = OUT / "sync_bench"


def paragraphs() -> list[str]:
    out = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        out += [
            " ".join(p.split())
            for p in path.read_text().split("\n\n")
            if len(p.split()) > 30 and not p.lstrip().startswith(("#", "```", "|", "<!--"))
        ]
    return out


def make_site(folder: Path, pages: int) -> None:
    texts = paragraphs()
    folder.mkdir(parents=True)
    links = []
    for n in range(pages):
        name = f"page-{n:04d}.html"
        (folder / name).write_text(
            f"<html><head><title>Page {n}</title></head><body><article><h1>Page {n}</h1>"
            f"<p>{texts[n % len(texts)]} (page {n})</p></article></body></html>"
        )
        links.append(f'<a href="{name}">Page {n}</a>')
    (folder / "index.html").write_text(f"<html><body><h1>Index</h1><p>{' '.join(links)}</p></body></html>")
    (folder / "robots.txt").write_text("User-agent: *\nAllow: /\n")


def make_repo(folder: Path, files: int) -> None:
    from support.sites import commit_all, git

    texts = paragraphs()
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    for n in range(files):
        sub = folder / f"part-{n // 100:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"note-{n:04d}.md").write_text(f"# Note {n}\n\n{texts[(n * 7) % len(texts)]} (note {n})\n")
    commit_all(folder, "first")


def ragvps(env: dict[str, str], *args: str) -> tuple[float, object]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ragvps", *args], env=env, capture_output=True, text=True, cwd=ROOT, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ragvps {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, json.loads(done.stdout) if done.stdout.strip().startswith(("[", "{")) else done.stdout


def three_syncs(env: dict[str, str], name: str, change) -> list[dict]:
    rows = []
    for label in ("first", "again, nothing changed", "again, one item changed"):
        if label.endswith("one item changed"):
            change()
        wall, reports = ragvps(env, "sync", name, "--json")
        report = reports[0]  # type: ignore[index]
        rows.append(
            {
                "label": label,
                "wall_s": wall,
                **{
                    k: report[k]
                    for k in ("seconds", "items", "read", "unchanged", "deleted", "documents_stored", "chunks_embedded")
                },
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    args = parser.parse_args()
    from support.sites import commit_all, served

    shutil.rmtree(WORK, ignore_errors=True)
    make_site(WORK / "site", args.items)
    make_repo(WORK / "repo", args.items)
    env = {
        **os.environ,
        "RAGVPS_DATA_DIR": str(WORK / "data"),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_DATABASE_URL": "",
        "PYTHONPATH": str(ROOT),
    }
    load = [os.getloadavg()]
    results = {}
    try:
        with served(WORK / "site") as base:
            ragvps(
                env,
                "source",
                "add",
                "web",
                "site",
                f"{base}/index.html",
                "--max-pages",
                str(args.items + 1),
                "--max-depth",
                "1",
            )

            def touch_page() -> None:
                page = WORK / "site" / "page-0007.html"
                page.write_text(page.read_text().replace("(page 7)", "(page 7, changed)"))

            results["web site"] = three_syncs(env, "site", touch_page)
        ragvps(env, "source", "add", "git", "repo", str(WORK / "repo"))

        def touch_file() -> None:
            note = WORK / "repo" / "part-00" / "note-0007.md"
            note.write_text(note.read_text() + "\nChanged.\n")
            commit_all(WORK / "repo", "one change")

        results["git repository"] = three_syncs(env, "repo", touch_file)
    finally:
        subprocess.run([sys.executable, "-m", "ragvps", "server", "stop"], env=env, capture_output=True, check=False)
    load.append(os.getloadavg())
    section = report(results, args.items, load)
    print(section)
    if not args.no_write:
        write_section("sync_bench", section)


def report(results: dict[str, list[dict]], items: int, load) -> str:
    loads = " -> ".join(f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in load)
    lines = [
        "<!-- sync_bench:start -->",
        "## Connected sources synced again (`python bench/sync_bench.py`)",
        "",
        f"A {items:,}-page web site (served on 127.0.0.1, with its start page) and a {items:,}-file git "
        "repository "
        "(a path), each synced three times by `ragvps sync` with the local embedder: first, again with nothing "
        "changed, again after one page or file changed. Wall: the whole `ragvps sync` process (Python start, "
        "database open); sync: the sync's own seconds. "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 2 cores, load {loads}.",
        "",
        "| source | sync | wall s | sync s | of the first | items | read | unchanged | stored | chunks embedded |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        first = rows[0]["seconds"]
        for r in rows:
            lines.append(
                f"| {name} | {r['label']} | {r['wall_s']:.1f} | {r['seconds']:.2f} | "
                f"{100 * r['seconds'] / first:.1f}% | {r['items']:,} | {r['read']:,} | {r['unchanged']:,} | "
                f"{r['documents_stored']:,} | {r['chunks_embedded']:,} |"
            )
    lines += ["", "Goal: a second sync with nothing changed under 10% of the first.", "<!-- sync_bench:end -->"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

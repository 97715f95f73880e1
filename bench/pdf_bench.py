"""PDF reading (issue 53): PDFium with the layout pass against the baseline's pypdf, side by side in one run.

    flock -x /work/quiet.lock python bench/pdf_bench.py --baseline /work/base-pdf
    flock -x /work/quiet.lock python bench/pdf_bench.py --baseline /work/base-pdf --debian-docs [--pdf FILE ...]
    flock -x /work/quiet.lock python bench/pdf_bench.py --baseline /work/base-pdf --tikz-docs --baseline-rounds 1

Inputs: ../shared/data/pdf_sample (10 one-page PDFs with the publisher's text), a long two-column book this bench
writes (tests/support/pdf_files.py: --pages pages, a running head and foot, 16 pt bold chapter headings, hyphenated
line ends, ligatures; its columns written one after the other, as LaTeX does, and a copy whose columns' lines
alternate in the file), and a real manual if the machine has one (/usr/share/doc/libtasn1-doc/libtasn1.pdf, 36
pages of texinfo/TeX). For each input and each checkout, in fresh processes:
- reading: `sources.load` over the files (pages/s), then chunking the documents, timed apart: the share of
  `ragvps chunk` spent reading, and of an ingest once the local model's embedding is counted (its rate measured
  here on 96 of the chunks);
- `python -m ragvps chunk DIR` end to end: its wall time (unsampled runs), and the peak memory (PSS) of its process
  tree (the PDF readers included) in a run of its own, beside pypdf alone extracting the same files' text in the same
  run (the issue's bar: at most 0.25x);
- with --debian-docs (and --pdf FILE, repeated), long real PDFs instead of the books, in a section of their own:
  LaTeX manuals from Debian bookworm's TeX Live documentation (DEBIAN_DOCS: package, version and path, fetched with
  `apt-get download` into bench/out/pdf/debs), six of them German, and a folder of two-column ACM papers;
- with --tikz-docs, manuals drawn with TikZ/PGF (TIKZ_DOCS, from the same packages), whose heavy content streams
  pypdf reads at a few pages a second as it read the issue's German lecture script, in a section of their own;
- with --math-docs, long manuals set in math as a lecture script is (MATH_DOCS: the PGF manual's 1,300 pages among
  them), in a section of their own;
- fidelity: the Levenshtein ratio (rapidfuzz, whitespace normalised) of the text read against the ground truth
  (the publisher's text; the book's own paragraphs and headings).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from common import DATA, OUT, ROOT
from common.results import write_section
from support.pdf_files import HEIGHT, WIDTH, Book, Run

BENCH = OUT / "pdf"
DEBS = BENCH / "debs"
TEXDOC = "usr/share/doc/texlive-doc/"
# (input, Debian package=version, its file: a glob is a folder of papers); bookworm's TeX Live 2022
DEBIAN_DOCS = (
    ("texlive-de.pdf (German)", "texlive-lang-german=2022.20230122-1", "texlive/texlive-de/texlive-de.pdf"),
    (
        "biblatex-de-Benutzerhandbuch.pdf (German)",
        "texlive-lang-german=2022.20230122-1",
        "latex/translation-biblatex-de/biblatex-de-Benutzerhandbuch.pdf",
    ),
    ("microtype-DE.pdf (German)", "texlive-lang-german=2022.20230122-1", "latex/microtype-de/microtype-DE.pdf"),
    ("amsmath.pdf", "texlive-latex-base-doc=2022.20230122-3", "latex/amsmath/amsmath.pdf"),
    ("beameruserguide.pdf", "texlive-latex-recommended-doc=2022.20230122-3", "latex/beamer/beameruserguide.pdf"),
    (
        "acmart samples (16 ACM papers, two- and one-column)",
        "texlive-publishers-doc=2022.20230122-4",
        "latex/acmart/samples/sample-*.pdf",
    ),
    ("tipaman-de.pdf (German, TIPA)", "texlive-lang-german=2022.20230122-1", "latex/tipa-de/tipaman-de.pdf"),
    ("l2kurz.pdf (German)", "texlive-lang-german=2022.20230122-1", "latex/lshort-german/l2kurz.pdf"),
    ("csquotes-DE.pdf (German)", "texlive-lang-german=2022.20230122-1", "latex/csquotes-de/csquotes-DE.pdf"),
)
PICTURES = "texlive-pictures-doc=2022.20230122-3"
# --tikz-docs: manuals drawn with TikZ/PGF, whose heavy content streams pypdf reads at a few pages a second, as it
# read the issue's lecture script (in a section of their own, pdf_tikz); every one measured is here
TIKZ_DOCS = (
    ("pgf-interference-de.pdf (German)", PICTURES, "latex/pgf-interference/pgf-interference-de.pdf"),
    ("tkz-euclide.pdf", PICTURES, "latex/tkz-euclide/tkz-euclide.pdf"),
    ("circuitikzmanual.pdf", PICTURES, "latex/circuitikz/circuitikzmanual.pdf"),
    ("tzplot-doc.pdf", PICTURES, "latex/tzplot/tzplot-doc.pdf"),
    ("forest-doc.pdf", PICTURES, "latex/forest/forest-doc.pdf"),
    ("tikzpingus-doc.pdf", PICTURES, "latex/tikzpingus/tikzpingus-doc.pdf"),
    ("pgfgantt.pdf", PICTURES, "latex/pgfgantt/pgfgantt.pdf"),
    ("yquant-doc.pdf", "texlive-science-doc=2022.20230122-4", "latex/yquant/yquant-doc.pdf"),
    ("genealogytree.pdf", PICTURES, "latex/genealogytree/genealogytree.pdf"),
)
SCIENCE = "texlive-science-doc=2022.20230122-4"
MATH_DOCS = (  # long manuals set in math, as a lecture script is; named before any was measured
    ("pgfmanual.pdf", PICTURES, "generic/pgf/pgfmanual.pdf"),
    ("numerica.pdf", SCIENCE, "latex/numerica/numerica.pdf"),
    ("cryptocode.pdf", SCIENCE, "latex/cryptocode/cryptocode.pdf"),
    ("nicematrix.pdf", SCIENCE, "latex/nicematrix/nicematrix.pdf"),
    ("chemmacros-manual.pdf", SCIENCE, "latex/chemmacros/chemmacros-manual.pdf"),
    ("prooftrees.pdf", SCIENCE, "latex/prooftrees/prooftrees.pdf"),
)
MANUAL = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
SENTENCE = (
    "the harbour crane lifts crates onto the quay while a lighthouse keeper counts ships and writes their names "
    "into a ledger beside the extraordinarily complicated signalling apparatus of the northern breakwater at dawn"
)
WORDS = SENTENCE.split()

READ = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from ragvps.ingest.sources import scan, load
from ragvps.ingest.chunk import ChunkerConfig, chunk_documents
t0 = time.perf_counter()
docs = [d for f in scan(Path(sys.argv[2])).files for d in load(f, lambda w: None)]
t1 = time.perf_counter()
chunks = [c for cs in chunk_documents(docs, ChunkerConfig("structure", 200, 30, 256)) for c in cs]
t2 = time.perf_counter()
pages = sum(int(d.metadata.get("page_count") or 0) for d in docs)
texts = {d.source: d.text for d in docs}
print(json.dumps({"read": t1 - t0, "chunk": t2 - t1, "pages": pages, "chunks": len(chunks), "texts": texts,
                  "sample": [c.text for c in chunks[:: max(1, len(chunks) // 96)]][:96]}))
"""

PYPDF = r"""
import json, sys, time
from pathlib import Path
import pypdf
t0 = time.perf_counter()
texts = {p.name: "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(p).pages)
         for p in sorted(Path(sys.argv[1]).glob("*.pdf"))}
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def book_chapters(pages: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(53)
    chapters = []
    for n in range(max(1, pages // 2)):
        paras = []
        for k in range(18):
            words = [rng.choice(WORDS) for _ in range(rng.randint(40, 90))]
            words[rng.randrange(len(words))] = "\ufb01sh\ufb02oat"
            paras.append(f"Paragraph {n}.{k} " + " ".join(words) + ".")
        chapters.append((f"Chapter {n + 1} of the harbour", paras))
    return chapters


def write_truetype(path: Path, pages: list[list[Run]]) -> None:
    """The book's pages written by reportlab in Bitstream Vera (TrueType, subset and embedded, with a ToUnicode map),
    as most PDF producers write text: the font work a reader does per page is real."""
    from reportlab.pdfbase import pdfmetrics  # lazy: the bench extra
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas
    from reportlab.rl_config import TTFSearchPath  # noqa: F401  (reportlab finds Vera in its own fonts folder)

    pdfmetrics.registerFont(TTFont("Vera", "Vera.ttf"))
    pdfmetrics.registerFont(TTFont("VeraBd", "VeraBd.ttf"))
    page = canvas.Canvas(str(path), pagesize=(WIDTH, HEIGHT))
    for runs in pages:
        for run in runs:
            page.setFont("VeraBd" if run.bold else "Vera", run.size)
            page.drawString(run.x, run.y, run.text.replace("\ufb01", "fi").replace("\ufb02", "fl"))
        page.showPage()
    page.save()


def truth(chapters: list[tuple[str, list[str]]]) -> str:
    text = "\n".join(f"{title}\n" + "\n".join(paras) for title, paras in chapters)
    return text.replace("\ufb01", "fi").replace("\ufb02", "fl")


def sample_input() -> dict[str, tuple[Path, dict[str, str]]]:
    """The sample's PDFs in a folder of their own (its txt/ ground truth is not for `ragvps chunk` to read)."""
    sample = DATA / "pdf_sample"
    if not sample.exists():
        return {}
    folder = BENCH / "pdf_sample"
    folder.mkdir(parents=True, exist_ok=True)
    for pdf in sample.glob("*.pdf"):
        shutil.copy(pdf, folder / pdf.name)
    return {
        "pdf_sample": (folder, {p.stem + ".pdf": p.read_bytes().decode("cp1252") for p in (sample / "txt").glob("*")})
    }


def inputs(pages: int) -> dict[str, tuple[Path, dict[str, str]]]:
    """name -> (a folder of PDFs, file name -> its ground truth)."""
    out = sample_input()
    chapters = book_chapters(pages)
    for name, interleave in (("book", False), ("book_interleaved", True), ("book_truetype", False)):
        folder = BENCH / f"{name}-{pages}"
        if not (folder / "book.pdf").exists():
            folder.mkdir(parents=True, exist_ok=True)
            book = Book("The Harbour Book", interleave=interleave)
            if name == "book_truetype":
                write_truetype(folder / "book.pdf", book.pages(chapters))
            else:
                book.write(folder / "book.pdf", chapters)
        out[name] = (folder, {"book.pdf": truth(chapters)})
    if MANUAL.exists():
        (BENCH / "manual").mkdir(parents=True, exist_ok=True)
        shutil.copy(MANUAL, BENCH / "manual" / MANUAL.name)
        out["libtasn1 manual"] = (BENCH / "manual", {})
    return out


def debian_docs(docs: tuple[tuple[str, str, str], ...]) -> dict[str, tuple[Path, dict[str, str]]]:
    """DEBIAN_DOCS or TIKZ_DOCS, each in a folder of its own: the packages fetched once (`apt-get download`), kept in
    DEBS."""
    out: dict[str, tuple[Path, dict[str, str]]] = {}
    for name, package, member in docs:
        tree = DEBS / package.replace("=", "_")
        if not tree.exists():
            DEBS.mkdir(parents=True, exist_ok=True)
            before = set(DEBS.glob("*.deb"))
            subprocess.run(["apt-get", "download", package], cwd=DEBS, check=True, capture_output=True)
            (deb,) = set(DEBS.glob("*.deb")) - before
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
            deb.unlink()
        folder = BENCH / "real" / name.split(" ")[0]
        folder.mkdir(parents=True, exist_ok=True)
        for pdf in sorted((tree / TEXDOC).glob(member)):
            shutil.copy(pdf, folder / pdf.name)
        out[name] = (folder, {})
    return out


def given_pdfs(paths: list[Path]) -> dict[str, tuple[Path, dict[str, str]]]:
    out: dict[str, tuple[Path, dict[str, str]]] = {}
    for path in paths:
        folder = BENCH / "given" / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / path.name)
        out[path.name] = (folder, {})
    return out


def child_json(args: list[str], env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{args[:2]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def pss(pid: int) -> int:
    """The process's proportional set size, in bytes (its RSS where the kernel has no smaps_rollup)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return int(psutil.Process(pid).memory_info().rss)


def cli_chunk(tree: Path, folder: Path, sampled: bool = False) -> dict[str, float]:
    """`python -m ragvps chunk folder` from `tree`: wall seconds; `sampled`, the peak memory of its process tree too
    (sampled every 10 ms): the sum of its processes' PSS, which counts the pages a forked reader shares with the command
    once, not in each. Reading PSS walks a process's page tables (about 20% of a long PDF's time here), so a timed run
    is not sampled."""
    data = Path(tempfile.mkdtemp(prefix="pdfbench-"))
    (data / "empty.toml").write_text("")
    env = os.environ | {
        "PYTHONPATH": str(tree),
        "RAGVPS_DATA_DIR": str(data / "d"),
        "RAGVPS_CONFIG": str(data / "empty.toml"),
    }
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "chunk", str(folder), "--json"],
        env=env,
        cwd=data,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    peak = 0
    if sampled:
        top = psutil.Process(proc.pid)
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                peak = max(peak, sum(pss(p.pid) for p in [top, *top.children(recursive=True)]))
            time.sleep(0.01)
    else:
        proc.wait()
    seconds = time.monotonic() - start
    chunks = json.loads(proc.stdout.read() if proc.stdout else "{}").get("chunks", 0)
    shutil.rmtree(data, ignore_errors=True)
    return {"seconds": seconds, "peak_mb": peak / (1 << 20), "chunks": chunks}


def fidelity(texts: dict[str, str], gold: dict[str, str]) -> float | None:
    from rapidfuzz.distance import Levenshtein  # lazy: the bench extra

    pairs = [(" ".join(texts[name].split()), " ".join(gold[name].split())) for name in gold if name in texts]
    if not pairs:
        return None
    return sum(Levenshtein.normalized_similarity(a, b) for a, b in pairs) / len(pairs)


def embed_rate(sample: list[str]) -> float:
    """Chunks a second the local model embeds (this machine, now)."""
    sys.path.insert(0, str(ROOT))
    from ragvps.config import Settings
    from ragvps.embed.registry import make_embedder

    embedder = make_embedder(Settings.of(embedder="local"))
    embedder.embed(sample[:8])
    start = time.perf_counter()
    embedder.embed(sample)
    return len(sample) / (time.perf_counter() - start)


def measure(
    trees: dict[str, Path], sets: dict[str, tuple[Path, dict[str, str]]], rounds: int, baseline_rounds: int
) -> tuple[list[dict], float]:
    rows, sample = [], []
    for name, (folder, gold) in sets.items():
        alone = min(child_json(["-c", PYPDF, str(folder)])["seconds"] for _ in range(rounds))
        for tree_name, tree in trees.items():
            runs = rounds if tree_name == "this" else baseline_rounds
            reads = [child_json(["-c", READ, str(tree), str(folder)]) for _ in range(runs)]
            read = min(reads, key=lambda r: r["read"])
            cli = min((cli_chunk(tree, folder) for _ in range(runs)), key=lambda r: r["seconds"])
            memory = cli_chunk(tree, folder, sampled=True)
            if tree_name == "this" and name != "pdf_sample" and len(read["sample"]) > len(sample):
                sample = read["sample"]  # the embedding rate measured on the most chunks
            row = {"input": name, "tree": tree_name, "pages": read["pages"], "read": read["read"]}
            row |= {"chunk": min(r["chunk"] for r in reads), "chunks": read["chunks"], "cli": cli["seconds"]}
            row |= {
                "peak_mb": memory["peak_mb"],
                "pypdf": alone,
                "fidelity": fidelity(read["texts"], gold),
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items()}), flush=True)
    return rows, embed_rate(sample) if sample else 0.0


def table(rows: list[dict], rate: float) -> list[str]:
    lines = [
        "| input | reader | pages | read s | pages/s | chunk s | read share of `ragvps chunk` | read share of ingest "
        "(est.) | chunks | `ragvps chunk` s | pypdf alone s | chunk / pypdf | peak PSS MB | fidelity |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        embed = r["chunks"] / rate if rate else 0.0
        fid = f"{r['fidelity']:.3f}" if r["fidelity"] is not None else "-"
        lines.append(
            f"| {r['input']} | {'PDFium (this)' if r['tree'] == 'this' else 'pypdf (baseline)'} | {r['pages']} | "
            f"{r['read']:.2f} | {r['pages'] / r['read']:.0f} | {r['chunk']:.2f} | "
            f"{r['read'] / (r['read'] + r['chunk']):.0%} | {r['read'] / (r['read'] + r['chunk'] + embed):.0%} | "
            f"{r['chunks']} | {r['cli']:.2f} | {r['pypdf']:.2f} | {r['cli'] / r['pypdf']:.2f}x | "
            f"{r['peak_mb']:.0f} | {fid} |"
        )
    return lines


def ratios(rows: list[dict]) -> list[str]:
    out = []
    by = {(r["input"], r["tree"]): r for r in rows}
    for (name, tree), r in by.items():
        base = by.get((name, "baseline"))
        if tree == "this" and base:
            out.append(
                f"- {name}: reading {base['read'] / r['read']:.1f}x faster, "
                f"`ragvps chunk` {base['cli'] / r['cli']:.1f}x faster ({r['cli']:.2f} s against {base['cli']:.2f} s), "
                f"peak PSS {r['peak_mb'] / base['peak_mb']:.2f}x"
            )
    return out


def bar(rows: list[dict]) -> list[str]:
    """Issue 53's bar on each input: `ragvps chunk` in at most 0.25x the time pypdf alone takes."""
    out = []
    for r in rows:
        if r["tree"] == "this":
            ratio = r["cli"] / r["pypdf"]
            holds = "holds" if ratio <= 0.25 else "does not hold"
            out.append(
                f"- {r['input']}, {r['pages']} pages: {r['cli']:.2f} s against pypdf's {r['pypdf']:.2f} s, "
                f"{ratio:.2f}x: the 0.25x bar {holds}"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout of the baseline (af33e0a: pypdf)")
    parser.add_argument("--pages", type=int, default=300, help="the long book's pages (about)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each measurement; the fastest is kept")
    parser.add_argument("--baseline-rounds", type=int, help="runs of the baseline's (default: --rounds)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write bench/RESULTS.md")
    parser.add_argument("--debian-docs", action="store_true", help="long real PDFs (DEBIAN_DOCS), not the books")
    parser.add_argument("--tikz-docs", action="store_true", help="manuals drawn with TikZ (TIKZ_DOCS), not the books")
    parser.add_argument("--math-docs", action="store_true", help="long manuals set in math (MATH_DOCS)")
    parser.add_argument("--pdf", type=Path, action="append", default=[], help="a real PDF to measure (repeatable)")
    args = parser.parse_args()
    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    real = args.debian_docs or args.tikz_docs or args.math_docs or bool(args.pdf)
    if args.tikz_docs:
        sets = debian_docs(TIKZ_DOCS) | given_pdfs(args.pdf)
    elif args.math_docs:
        sets = debian_docs(MATH_DOCS) | given_pdfs(args.pdf)
    elif real:
        sets = sample_input() | (debian_docs(DEBIAN_DOCS) if args.debian_docs else {}) | given_pdfs(args.pdf)
    else:
        sets = inputs(args.pages)
    load_before = os.getloadavg()
    rows, rate = measure(trees, sets, args.rounds, args.baseline_rounds or args.rounds)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    baseline = f" --baseline {args.baseline}" if args.baseline else ""
    flags = (" --debian-docs" if args.debian_docs else "") + (" --tikz-docs" if args.tikz_docs else "")
    flags += " --math-docs" if args.math_docs else ""
    flags += "".join(f" --pdf {p}" for p in args.pdf)
    flags += f" --baseline-rounds {args.baseline_rounds}" if args.baseline_rounds else ""
    name = "pdf_tikz" if args.tikz_docs else "pdf_math" if args.math_docs else "pdf_real" if real else "pdf_bench"
    title = {
        "pdf_math": "PDFs: long manuals set in math, `ragvps chunk` against pypdf alone (issue 53)",
        "pdf_tikz": "PDFs: manuals drawn with TikZ, `ragvps chunk` against pypdf alone (issue 53)",
        "pdf_real": "PDFs: long real manuals, `ragvps chunk` against pypdf alone (issue 53)",
        "pdf_bench": "PDFs: PDFium and the layout pass against pypdf (issue 53)",
    }[name]
    runs = f"{args.rounds} runs each" + (f" (the baseline's {args.baseline_rounds})" if args.baseline_rounds else "")
    section = [
        f"<!-- {name}:start -->",
        f"## {title}",
        "",
        f"`flock -x /work/quiet.lock python bench/pdf_bench.py{baseline}{flags or f' --pages {args.pages}'}` on "
        f"{head.strip()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
        f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; the fastest of {runs}. "
        f"Ingest's embedding estimated at the local model's {rate:.1f} chunks/s measured here.",
        "",
        *table(rows, rate),
        "",
        *ratios(rows),
        *([""] + bar(rows) if real else []),
        f"<!-- {name}:end -->",
    ]
    print("\n".join(section))
    if not args.no_write:
        write_section(name, "\n".join(section) + "\n")


if __name__ == "__main__":
    main()

"""bench/RESULTS.md sections: each benchmark owns the text between its start and end markers."""

from __future__ import annotations

from pathlib import Path

from common import ROOT

RESULTS = ROOT / "bench" / "RESULTS.md"


def relative(text: str, root: Path = ROOT) -> str:
    """`text` with this machine's absolute paths made relative to the repository (`bench/out/x`, `../shared/..`)."""
    return text.replace(f"{root}/", "").replace(f"{root.parent}/", "../")


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


PREVIOUS = "<details><summary>The previous run</summary>"


def folded(old: str) -> str:
    """The run a new one replaces, folded beneath it: its text without its markers, its heading and its own previous
    run (one run back is kept here; older ones are in git)."""
    start, end = old.splitlines()[0], old.splitlines()[-1]
    body = old[len(start) : len(old) - len(end)].strip("\n")
    if PREVIOUS in body:
        body = body[: body.index(PREVIOUS)].rstrip("\n")
    lines = body.splitlines()
    if lines and lines[0].startswith("## "):
        lines = lines[1:]
    return f"\n\n{PREVIOUS}\n\n" + "\n".join(lines).strip("\n") + "\n\n</details>\n"


def write_section(name: str, section: str, results: Path = RESULTS) -> None:
    """Replace the benchmark's section (which starts and ends with its markers) keeping the run it replaces as the
    previous one, folded beneath; or append it."""
    start, end = markers(name)
    section = relative(section)
    text = results.read_text(encoding="utf-8") if results.exists() else "# Benchmark results\n"
    if start in text and end in text:
        old = text[text.index(start) : text.index(end) + len(end)]
        new = section.rstrip("\n").removesuffix(end).rstrip("\n") + folded(old) + end
        text = text[: text.index(start)] + new + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    results.write_text(text, encoding="utf-8")

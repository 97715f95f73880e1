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


def write_section(name: str, section: str, results: Path = RESULTS) -> None:
    """Replace the benchmark's section (which starts and ends with its markers), or append it."""
    start, end = markers(name)
    section = relative(section)
    text = results.read_text(encoding="utf-8") if results.exists() else "# Benchmark results\n"
    if start in text and end in text:
        text = text[:text.index(start)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    results.write_text(text, encoding="utf-8")

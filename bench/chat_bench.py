"""Chat benchmark: a follow-up turn's gold-chunk recall@5 with the history and without it, on the hand-written
two-turn conversations over docs/ (bench/data/followups.jsonl), and the latency of /v1/chat/completions
answered from the answer cache, against a real `ragvps serve` process.

    python bench/chat_bench.py [--data-dir bench/out/chat] [--requests 200] [--no-write]

Each conversation's first turn is answered by the chat use case (extractive, as a client would show it and
send it back); its second turn is then retrieved (top 5, hybrid) for: the last turn alone, the rule the chat
use case applies without an LLM, and, for comparison, both user turns joined and a hand-written standalone
question (the ceiling of an LLM rewrite, which cannot run here). A hit is the gold chunk when
it comes from the gold document and contains the gold quote. Beside them, bench/data/unrelated_pairs.jsonl: a
second question on a new topic must get the answer it gets asked alone (the history changes none of them).
With `--baseline DIR` both sets are measured for that checkout too, in a process importing it, in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from common import ROOT

if os.environ.get("CHAT_BENCH_CHECKOUT"):  # the baseline's measuring process imports that checkout's ragvps
    sys.path.insert(0, os.environ["CHAT_BENCH_CHECKOUT"])
from common.results import markers, write_section
from support.llm_server import FakeLLM
from support.serve_server import Server

from ragvps.app import App, ChatRequest, SearchRequest
from ragvps.app.chat import conversation, standalone
from ragvps.config import Settings

SET = ROOT / "bench" / "data" / "followups.jsonl"
UNRELATED = ROOT / "bench" / "data" / "unrelated_pairs.jsonl"
SHORT = ROOT / "bench" / "data" / "short_pairs.jsonl"  # second questions of 2-4 words on a subject of their own
CLOSINGS = ROOT / "bench" / "data" / "closings.jsonl"  # thanks and bye; Open WebUI's Add Details and More Concise
START, END = markers("chat_bench")
K = 5
MAX_SECONDS = 120.0  # each latency phase stops here whatever --requests says


def norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def load(path: Path = SET) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def is_gold(hit: Any, row: dict[str, Any]) -> bool:
    return hit.path.endswith(row["doc"]) and norm(row["quote"]) in norm(hit.text)


def recall(app: App, rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, float]], list[dict[str, Any]]]:
    """recall@5 (gold chunk, gold document) of the second turn for each way of building its query."""
    ways = (
        "last turn alone",
        "rule (no LLM: the default)",
        "both user turns joined",
        "hand-written standalone question (what a good LLM rewrite would give)",
    )
    found: dict[str, list[tuple[bool, bool]]] = {w: [] for w in ways}
    detail = []
    for row in rows:
        first, second = row["turns"]
        answer = app.chat(ChatRequest((("user", first),), use_cache=False))
        turns, question = conversation([("user", first), ("assistant", answer.content), ("user", second)])
        queries = {
            ways[0]: second,
            ways[1]: standalone(app, turns, question, use_cache=False).question,
            ways[2]: f"{first} {second}",
            ways[3]: row["standalone"],
        }
        seen = {}
        for way, query in queries.items():
            hits = app.search(SearchRequest(query, k=K)).hits
            chunk_hit = any(is_gold(h, row) for h in hits)
            found[way].append((chunk_hit, any(h.path.endswith(row["doc"]) for h in hits)))
            seen[way] = chunk_hit
        detail.append({"id": row["id"], "query": queries[ways[1]], **seen})
    table = {
        w: {"chunk": sum(c for c, _ in v) / len(v), "doc": sum(d for _, d in v) / len(v)} for w, v in found.items()
    }
    return table, detail


def unrelated(app: App, rows: list[dict[str, Any]]) -> list[str]:
    """The ids of the pairs whose second answer (text and sources) changed because the first turn came before it."""
    changed = []
    for row in rows:
        first, second = row["turns"]
        a1 = app.chat(ChatRequest((("user", first),), use_cache=False)).content
        alone = app.chat(ChatRequest((("user", second),), use_cache=False)).content
        after = app.chat(ChatRequest((("user", first), ("assistant", a1), ("user", second)), use_cache=False)).content
        if after != alone:
            changed.append(row["id"])
    return changed


def quoted(content: str) -> str:
    """An extractive answer's quotes: without its label and its source list."""
    return content.partition("\n\n**Sources**")[0].partition("\n")[2]


def follow_up_quotes(app: App, rows: list[dict[str, Any]]) -> list[str]:
    """The ids of the follow-ups whose answer quotes the sentence that answers them (the row's gold quote)."""
    good = []
    for row in rows:
        first, second = row["turns"]
        a1 = app.chat(ChatRequest((("user", first),), use_cache=False)).content
        a2 = app.chat(ChatRequest((("user", first), ("assistant", a1), ("user", second)), use_cache=False)).content
        if norm(row["quote"]) in norm(quoted(a2)):
            good.append(row["id"])
    return good


def standalone_quotes(app: App, rows: list[dict[str, Any]]) -> list[str]:
    """The ids of the follow-ups whose hand-written standalone question, asked alone, is answered with the gold
    quote: what the extractive answer does with what a perfect rewrite would give it."""
    good = []
    for row in rows:
        answer = app.chat(ChatRequest((("user", row["standalone"]),), use_cache=False)).content
        if norm(row["quote"]) in norm(quoted(answer)):
            good.append(row["id"])
    return good


def closings(app: App, rows: list[dict[str, Any]]) -> list[str]:
    """The ids of the closings answered with a closing (no quote, no source) and of the regenerate variants
    answered as the question before them was."""
    good = []
    for row in rows:
        first, second = row["turns"]
        a1 = app.chat(ChatRequest((("user", first),), use_cache=False)).content
        a2 = app.chat(ChatRequest((("user", first), ("assistant", a1), ("user", second)), use_cache=False)).content
        if row["expect"] == "closing":
            ok = "Extractive answer" not in a2 and "**Sources**" not in a2 and "[1]" not in a2
        else:
            ok = bool(quoted(a1)) and quoted(a2) == quoted(a1)
        if ok:
            good.append(row["id"])
    return good


def conversations(data_dir: Path) -> dict[str, Any]:
    """Both sets against this process's ragvps, over docs/ ingested into data_dir."""
    settings = Settings.of(data_dir=data_dir)  # each checkout's default model (MiniLM before issue 52, USE after)
    with App.open(settings) as app:
        ingest = app.ingest(ROOT / "docs")
        table, detail = recall(app, load())
        changed = unrelated(app, load(UNRELATED))
        turns = {
            "short_changed": unrelated(app, load(SHORT)),
            "quoting": follow_up_quotes(app, load()),
            "standalone_quoting": standalone_quotes(app, load()),
            "closings": closings(app, load(CLOSINGS)),
        }
        return {
            "turns": turns,
            "table": table,
            "detail": detail,
            "changed": changed,
            "chunks": app.health().chunks,
            "ingest": str(ingest),
        }


def baseline_conversations(checkout: Path, data_dir: Path) -> dict[str, Any]:
    """`conversations` in a process importing the other checkout's ragvps (the same sets, the same code here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    env |= {"CHAT_BENCH_CHECKOUT": str(checkout.resolve())}
    out = subprocess.run(
        [sys.executable, __file__, "--conversations-json", "--data-dir", str(data_dir)],
        env=env,
        cwd=checkout,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def once(c: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """One request, read to its end; the `ragvps` field of the answer (of its last chunk, streamed)."""
    if "question" in body:  # /ask, the reference
        r = c.post("/ask", json=body)
        r.raise_for_status()
        return dict(r.json()) | {"rewrite_cache": "-"}
    if not body.get("stream"):
        r = c.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        return dict(r.json()["ragvps"])
    info: dict[str, Any] = {}
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                info = json.loads(line[6:]).get("ragvps") or info
    return info


def latency(server: Server, body: dict[str, Any], n: int) -> dict[str, Any]:
    """ms per request for the same body n times (the first, a miss, is not counted)."""
    times: list[float] = []
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        once(c, body)
        deadline = time.monotonic() + MAX_SECONDS
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            start = time.perf_counter()
            info = once(c, body)
            times.append((time.perf_counter() - start) * 1000)
        assert info["cache"] == "hit", info["cache"]
    times.sort()
    return {
        "n": len(times),
        "p50": statistics.median(times),
        "p95": times[int(0.95 * (len(times) - 1))],
        "rewrite_cache": info["rewrite_cache"],
    }


def phases(server: Server, rows: list[dict[str, Any]], n: int) -> list[tuple[str, dict[str, Any]]]:
    """The extractive phases against one server: /ask for reference, then the chat route's cache hits."""
    first, second = rows[0]["turns"]
    single = {"model": "ragvps", "messages": [{"role": "user", "content": first}]}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        a1 = c.post("/v1/chat/completions", json=single).json()["choices"][0]["message"]["content"]
    follow = {
        "model": "ragvps",
        "messages": [*single["messages"], {"role": "assistant", "content": a1}, {"role": "user", "content": second}],
    }
    return [
        ("reference: `/ask`, the same first question", latency(server, {"question": first}, n)),
        ("extractive, first turn", latency(server, single, n)),
        ("extractive, follow-up (rule)", latency(server, follow, n)),
        ("extractive, follow-up, `stream: true`", latency(server, follow | {"stream": True}, n)),
    ]


def llm_phase(server: Server, rows: list[dict[str, Any]], n: int) -> list[tuple[str, dict[str, Any]]]:
    first, second = rows[0]["turns"]
    follow = {
        "model": "ragvps",
        "messages": [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "An earlier answer."},
            {"role": "user", "content": second},
        ],
    }
    return [("LLM (stand-in), follow-up: rewrite and answer both cached", latency(server, follow, n))]


def measure_latency(
    envs: dict[str, dict[str, str]], rows: list[dict[str, Any]], args: argparse.Namespace
) -> list[tuple[str, dict[str, Any]]]:
    """Each phase on each checkout's server, the checkouts alternating phase by phase (so the machine's load
    falls on both alike); a row's timing is {"now": ..., "before": ...}."""
    llm = FakeLLM().start()
    with_llm = {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_GENERATOR_API_KEY": "sk-bench-0123456789",
    }
    results: dict[str, dict[str, dict[str, Any]]] = {}
    order: list[str] = []
    try:
        for how, run in (("", phases), ("-llm", llm_phase)):
            servers = {
                name: Server(
                    env | (with_llm if how else {}), args.data_dir / f"chat-bench-{name}{how}.log", key=None
                ).start(timeout=300)
                for name, env in envs.items()
            }
            try:
                per = {name: run(server, rows, args.requests) for name, server in servers.items()}
            finally:
                for server in servers.values():
                    server.stop()
            for name, measured in per.items():
                for row, t in measured:
                    if row not in results:
                        order.append(row)
                    results.setdefault(row, {})[name] = t
    finally:
        llm.stop()
    return [(row, results[row]) for row in order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "out" / "chat")
    parser.add_argument("--requests", type=int, default=200, help="Requests per latency phase.")
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    parser.add_argument("--recall-only", action="store_true", help="Print the recall table and the misses only.")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="Another checkout (e.g. a git worktree of the commit "
        "before the answer memo) whose server is measured side by side in the same run.",
    )
    parser.add_argument("--conversations-json", action="store_true", help=argparse.SUPPRESS)  # the baseline's process
    args = parser.parse_args()
    if args.conversations_json:
        print(json.dumps(conversations(args.data_dir)))
        return
    load_before = os.getloadavg()
    rows = load()
    now = conversations(args.data_dir)
    table, detail, chunks, ingest = now["table"], now["detail"], now["chunks"], now["ingest"]
    before = baseline_conversations(args.baseline, args.data_dir / "baseline-conv") if args.baseline else None
    if args.recall_only:
        print(
            json.dumps(
                {
                    "now": {k: now[k] for k in ("table", "changed", "turns")},
                    "before": before and {k: before.get(k) for k in ("table", "changed", "turns")},
                },
                indent=1,
            )
        )
        print("\n".join(json.dumps(d) for d in detail))
        return

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    (args.data_dir / "no-config.toml").touch()
    env |= {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_DATA_DIR": str(args.data_dir),  # each checkout's default model, as its conversations used
        "RAGVPS_CONFIG": str(args.data_dir / "no-config.toml"),
    }
    envs = {"now": env}
    if args.baseline:  # the same phases against another checkout's server, side by side in this run
        base_dir = args.data_dir / "baseline"
        base_dir.mkdir(parents=True, exist_ok=True)
        envs["before"] = env | {
            "PYTHONPATH": str(args.baseline.resolve()),
            "RAGVPS_DATA_DIR": str(base_dir),
            "PYTHONSAFEPATH": "1",
        }  # the server runs from this repository: not its cwd
        subprocess.run(
            [sys.executable, "-m", "ragvps", "ingest", str(ROOT / "docs")],
            env=envs["before"],
            cwd=args.baseline,
            check=True,
            capture_output=True,
            timeout=900,
        )
    timings = measure_latency(envs, rows, args)
    load_after = os.getloadavg()
    section = render(
        rows, chunks, ingest, table, detail, timings, load_before, load_after, now["changed"], before, now["turns"]
    )
    print(section)
    if not args.no_write:
        write_section("chat_bench", section)


def turns_table(now: dict[str, list[str]], base: dict[str, list[str]] | None) -> list[str]:
    """Issue 51's cases: short unrelated questions, follow-ups quoting what answers them, closings and regenerates."""
    n_short, n_follow, n_close = len(load(SHORT)), len(load()), len(load(CLOSINGS))

    def cells(t: dict[str, list[str]]) -> str:
        q, short, closed = len(t["quoting"]), len(t["short_changed"]), len(t["closings"])
        return f"{short} of {n_short} | {q / n_follow:.2f} ({q} of {n_follow}) | {closed} of {n_close}"

    lines = [
        "",
        "Turns users hit (issue 51): `bench/data/short_pairs.jsonl` (a docs question, then 2-4 words on a subject of"
        " their own: the answer must be the one asked alone), the follow-ups above scored on whether the answer quotes"
        " the gold sentence, `bench/data/closings.jsonl` (thanks and bye get a closing; Add Details and More Concise"
        " re-answer the question before). Goal: 0 short pairs changed, >= 0.9 of follow-ups quoting an answering"
        " sentence.",
        "",
        "| checkout | short pairs changed | follow-ups quoting the answer | closings and regenerates right |",
        "|---|---|---|---|",
        f"| this one | {cells(now)} |",
    ]
    if base:
        lines.append(f"| baseline | {cells(base)} |")
    ceiling = now.get("standalone_quoting")
    if ceiling is not None:
        lines += [
            "",
            "The same follow-ups made standalone by hand and asked alone, with no conversation (what a perfect rewrite"
            f" would hand the extractive answer), quote the gold sentence {len(ceiling) / n_follow:.2f}"
            f" ({len(ceiling)} of {n_follow}): where both miss, the one sentence the extractive answer picks is the"
            " limit, not the conversation.",
        ]
    return [*lines, ""]


def render(
    rows: list[dict[str, Any]],
    chunks: int,
    ingest: Any,
    table: dict[str, dict[str, float]],
    detail: list[dict[str, Any]],
    timings: list[tuple[str, dict[str, Any]]],
    before: tuple[float, ...],
    after: tuple[float, ...],
    changed: list[str],
    base: dict[str, Any] | None = None,
    now_turns: dict[str, list[str]] | None = None,
) -> str:
    alone, rule = table["last turn alone"]["chunk"], table["rule (no LLM: the default)"]["chunk"]
    lines = [
        START,
        "## Conversations (`python bench/chat_bench.py`)",
        "",
        f"{datetime.date.today()}, {platform.machine()} {os.cpu_count()} cores, load average "
        f"{before[0]:.1f} before / {after[0]:.1f} after. {len(rows)} hand-written two-turn conversations over "
        f"docs/ ({chunks} chunks), `bench/data/followups.jsonl`: the second turn only makes sense with the "
        "first. Local model, hybrid search, top 5; the first turn answered by the chat use case (extractive) "
        "and sent back as a client would. The set was written before any run; after the first run seven "
        'follow-ups that still named their own topic (e.g. "Does it listen on a network port?") were '
        "reworded to name none (the first run: rule 0.906, last turn alone 0.656).",
        "",
        "| second turn retrieved with | gold-chunk recall@5 | gold-document recall@5 |"
        + (" chunk recall@5, baseline checkout |" if base else ""),
        "|---|---|---|" + ("---|" if base else ""),
    ]
    for way, r in table.items():
        lines.append(
            f"| {way} | {r['chunk']:.3f} | {r['doc']:.3f} |" + (f" {base['table'][way]['chunk']:.3f} |" if base else "")
        )
    pairs = len(load(UNRELATED))
    lines += [
        "",
        f"Unrelated pairs (`bench/data/unrelated_pairs.jsonl`, {pairs} pairs of questions on different "
        "topics of docs/, written before any run): the second question's answer (text and source list) after "
        "the first turn against the same question asked alone. The rule's test of whether a question stands "
        "alone (ragvps/generate/rewrite.py) was adjusted once after its first run on both sets: 'that' before "
        "a verb, 'its' after a name, 'each one' (issue 43).",
        "",
        "| checkout | answers changed by the history |",
        "|---|---|",
        f"| this one | {len(changed)} of {pairs} |",
    ]
    if base:
        lines.append(f"| baseline | {len(base['changed'])} of {pairs} |")
    if now_turns is not None:
        lines += turns_table(now_turns, base.get("turns") if base else None)
    goal = "met" if rule >= 0.8 and rule - alone >= 0.3 else "not met"
    lines += [
        "",
        f"Goal (with history >= 0.8 and >= 0.3 above without): {rule:.3f} vs {alone:.3f}, {goal}.",
        "The LLM rewrite itself cannot be measured here (no model runs on this machine); with one configured, "
        "the chat use case asks it instead of applying the rule, and the hand-written row is its ceiling.",
        "",
    ]
    missed = [d for d in detail if not d["rule (no LLM: the default)"]]
    if missed:
        lines.append("Missed with the rule: " + "; ".join(f"{d['id']} ({d['query']!r})" for d in missed) + ".")
        lines.append("")
    side = any("before" in t for _, t in timings)
    lines += [
        "`/v1/chat/completions` answered from the answer cache, one client on loopback, a real `ragvps serve`"
        + (
            " (before: the baseline checkout's server, measured alternately with this one in the same run):"
            if side
            else ":"
        ),
        "",
    ]
    if side:
        lines += [
            "| request | n | p50 ms before | p50 ms now | p50 ratio | p95 ms before | p95 ms now |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, t in timings:
            b, a = t["before"], t["now"]
            lines.append(
                f"| {name} | {a['n']:.0f} | {b['p50']:.1f} | {a['p50']:.1f} | {b['p50'] / a['p50']:.1f}x "
                f"| {b['p95']:.1f} | {a['p95']:.1f} |"
            )
    else:
        lines += ["| request | n | p50 ms | p95 ms |", "|---|---|---|---|"]
        for name, t in timings:
            lines.append(f"| {name} | {t['now']['n']:.0f} | {t['now']['p50']:.1f} | {t['now']['p95']:.1f} |")
    p50 = max(t["now"]["p50"] for name, t in timings if not name.startswith("reference"))
    lines += [
        "",
        f"Goal (cache-hit p50 <= 15 ms): worst p50 {p50:.1f} ms, {'met' if p50 <= 15 else 'not met'}. "
        "A repeated question is answered from the answer memo (docs/answers.md): one query, no embedding "
        "and no search.",
        END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

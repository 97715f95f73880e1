"""Where a question's embedding time goes (issue 34, item 4): the local model (all-MiniLM-L6-v2 int8) on questions
it has not seen (SciFact's claims and Chroma's questions), outside any server.

    python bench/query_embed_cost.py [--questions 400]

Per question, one at a time: the tokenizer alone, the ONNX session alone (intra-op threads 1 and 2), and
LocalEmbedder.embed (tokenize, run, pool; the memo missed). Then the throughput a server would get with 8 request
threads each embedding its own question (threads 1 and 2 per call), against those questions put together into
one model call of 4, 8 or 16 (what micro-batching would do). Last, the questions' graph (int8 arithmetic,
ragvps/embed/question_graph.py) against the float one: time per question and the cosine between their vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from common.scifact import unseen_questions


def per_call(fn, items) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    seconds = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        seconds.append(time.perf_counter() - t)
    return round(float(np.percentile(seconds, 50)) * 1000, 2), round(float(np.percentile(seconds, 95)) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=400)
    args = parser.parse_args()
    from ragvps.embed import local

    texts, _ = unseen_questions()
    texts = texts[: args.questions]
    out: dict[str, object] = {"load": os.getloadavg()[0], "questions": len(texts)}
    embedders = {t: local.LocalEmbedder(threads=t) for t in (1, 2)}
    tok = embedders[1].tokenizer
    out["tokens p50"] = float(np.median([len(tok.encode(t).ids) for t in texts]))
    out["tokenizer ms p50/p95"] = per_call(tok.encode, texts)

    def feeds(text: str) -> dict[str, np.ndarray]:
        ids = np.array([tok.encode(text).ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}

    inputs = [feeds(t) for t in texts]
    for threads, e in embedders.items():
        e.session.run(None, inputs[0])
        out[f"session.run ms p50/p95, {threads} thread(s)"] = per_call(lambda f, e=e: e.session.run(None, f), inputs)
        local._memo.clear()
        out[f"LocalEmbedder.embed ms p50/p95, {threads} thread(s)"] = per_call(lambda t, e=e: e._run([t]), texts)
    for threads, e in embedders.items():
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda t, e=e: e._run([t]), texts))
        out[f"8 threads, one question a call, {threads} thread(s) each: questions/s"] = round(
            len(texts) / (time.perf_counter() - t0), 1
        )
    for size in (4, 8, 16):
        e = local.LocalEmbedder(threads=2, sub_batch=size)
        t0 = time.perf_counter()
        for lo in range(0, len(texts), size):
            e._run(texts[lo : lo + size])
        out[f"one call of {size} questions, 2 threads: questions/s"] = round(len(texts) / (time.perf_counter() - t0), 1)
    # The questions' graph (ragvps/embed/question_graph.py): int8 arithmetic on the same weights, against the float one.
    for threads in (1, 2):
        exact = local.LocalEmbedder(threads=threads)
        fast = local.LocalEmbedder(threads=threads, graph=local.QUESTIONS)
        fast.session.run(None, inputs[0])
        out[f"questions' graph session.run ms p50/p95, {threads} thread(s)"] = per_call(
            lambda f, e=fast: e.session.run(None, f), inputs
        )
    cosines = (exact._run(texts) * fast._run(texts)).sum(axis=1)
    out["questions' graph: cosine to the float graph, mean / min"] = (
        round(float(cosines.mean()), 4),
        round(float(cosines.min()), 4),
    )
    out["load after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

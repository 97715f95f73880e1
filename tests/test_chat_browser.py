"""The official openai npm package in a browser: a page on another loopback port (an allowed CORS origin) calls
`ragvps serve` (a real process: the browser needs a socket) through the SDK, which sends its X-Stainless-*
headers, so the preflight must accept them. The package is installed once into a cache folder outside the
repository (RAGVPS_TEST_CACHE, default ~/.cache/ragvps-tests) with Debian's npm."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.browser import chromium, playwright
from support.serve_server import KEY, Server, free_port

QUESTION = "how do I stop the embedded database?"
OPENAI_NPM = "openai@5"

PAGE = """<!doctype html><meta charset="utf-8"><title>sdk</title>
<script type="module">
import OpenAI from "./openai/index.mjs";
from support import waiting
const q = new URLSearchParams(location.search);
const client = new OpenAI({baseURL: q.get("base"), apiKey: q.get("key"), dangerouslyAllowBrowser: true,
                           maxRetries: 0});
const messages = [{role: "user", content: q.get("question")}];
try {
  const done = await client.chat.completions.create({model: "ragvps", messages});
  let streamed = "";
  const stream = await client.chat.completions.create({model: "ragvps", messages, stream: true});
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  window.result = {content: done.choices[0].message.content, streamed};
} catch (e) {
  window.result = {error: String(e), status: e.status ?? null};
}
</script>"""


def openai_package() -> Path:
    """The openai npm package's folder, installed into the test cache on first use (or a skip saying why not)."""
    cache = Path(os.environ.get("RAGVPS_TEST_CACHE", Path.home() / ".cache" / "ragvps-tests")) / "npm-openai"
    package = cache / "node_modules" / "openai"
    if (package / "index.mjs").exists():
        return package
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("no npm to install the openai package with: apt-get install -y npm")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", OPENAI_NPM],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 or not (package / "index.mjs").exists():
        pytest.skip(f"npm could not install {OPENAI_NPM} into {cache}: {done.stderr.strip()[-300:]}")
    return package


@pytest.fixture(scope="module")
def page_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A page and the SDK's ES modules served from another loopback port (another origin)."""
    root = tmp_path_factory.mktemp("sdk-page")
    (root / "index.html").write_text(PAGE)
    (root / "openai").symlink_to(openai_package(), target_is_directory=True)

    class Handler(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript"}

        def log_message(self, *args: object) -> None:
            pass

    site = ThreadingHTTPServer(("127.0.0.1", free_port()), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}"
    site.shutdown()
    site.server_close()


def test_the_openai_npm_package_calls_the_server_from_another_origin(
    page_site: str, serve_env: dict[str, str], tmp_path: Path
):
    playwright()  # skipped here, before a server starts, where chromium or Playwright is missing
    env = serve_env | {"RAGVPS_API_KEYS": KEY, "RAGVPS_CORS_ORIGINS": page_site}
    srv = Server(env, tmp_path / "serve.log").start()
    try:
        with srv.client() as c:
            whole = c.post(
                "/v1/chat/completions", json={"model": "ragvps", "messages": [{"role": "user", "content": QUESTION}]}
            ).json()["choices"][0]["message"]["content"]
        with chromium() as browser:
            page = browser.new_page()
            query = f"?base={srv.url}/v1&key={KEY}&question={QUESTION.replace(' ', '+').replace('?', '%3F')}"
            page.goto(page_site + "/index.html" + query)
            page.wait_for_function("window.result !== undefined")
            result: dict[str, Any] = page.evaluate("window.result")
    finally:
        srv.stop()
    assert "error" not in result, json.dumps(result)
    assert result["content"] == result["streamed"] == whole and "**Sources**" in whole

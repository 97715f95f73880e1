"""Knowledge bases in one real `ragvps serve` process: a key scoped to one of them sees nothing of another
through any interface (search, ask, chat, the model list, MCP, stats, error messages); one with another
embedding model (768 dimensions, the Ollama stand-in) beside the local model's; a knowledge base dropped
or a key revoked while the server runs; an ingest and a reindex in one while another is queried."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import waiting
from support.browser import playwright
from support.serve_server import KEY, Server, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

pytestmark = pytest.mark.xdist_group("kb-serve")  # one server, its tests in order (the last drops a knowledge base)

SECRET = "journald"  # a word only the runbooks knowledge base holds
LIGHTHOUSE = "# The lighthouse keeper's manual\n\n## Lamp\n\nThe lamp is lit at sunset and put out at sunrise.\n"
RUNBOOK = (
    f"# Disk full runbook\n\n## Free space\n\nWhen the disk is full, vacuum the {SECRET} logs first, "
    "then the package cache.\n"
)
DEFAULT_TEXT = "# Office hours\n\nThe office opens at nine and closes at five.\n"


def run_cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(
        cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return done.stdout


def corpus(root: Path, name: str, text: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / f"{name}.md").write_text(text)
    return root / name


@pytest.fixture(scope="module")
def kbs(module_db_url: str, tmp_path_factory: pytest.TempPathFactory, ollama_server) -> dict[str, str]:
    root = tmp_path_factory.mktemp("kbs")
    env = ragvps_env(module_db_url, root / "data", ollama_url=ollama_server.url)
    run_cli(env, "ingest", str(corpus(root, "office", DEFAULT_TEXT)))
    for name, text in (("faq", LIGHTHOUSE), ("runbooks", RUNBOOK)):
        run_cli(env, "kb", "create", name)
        run_cli(env, "ingest", str(corpus(root, name, text)), "--kb", name)
    run_cli(env, "kb", "create", "nomic", "--model", "nomic-embed-text")
    run_cli(env, "ingest", str(corpus(root, "nomic", LIGHTHOUSE)), "--kb", "nomic")
    faq_key = run_cli(env, "key", "create", "--kb", "faq", "--role", "read", "--name", "faq-app").strip()
    return env | {"FAQ_KEY": faq_key, "ROOT": str(root)}


@pytest.fixture(scope="module")
def served(kbs: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    env = {k: v for k, v in kbs.items() if k not in ("FAQ_KEY", "ROOT")}
    srv = Server(env | {"RAGVPS_API_KEYS": KEY}, tmp_path_factory.mktemp("kb-serve") / "serve.log").start()
    yield srv
    srv.stop()


def as_faq(served: Server, kbs: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {kbs['FAQ_KEY']}"}, timeout=60)


def test_a_scoped_key_sees_nothing_of_another_knowledge_base(served: Server, kbs: dict[str, str]):
    bodies: list[str] = []
    with as_faq(served, kbs) as c:

        def call(method: str, path: str, **kw: object) -> httpx.Response:
            r = c.request(method, path, **kw)
            bodies.append(r.text)
            return r

        assert call("GET", "/kb").json()["knowledge_bases"] == [{"name": "faq", "default": False}]
        hits = call("POST", "/kb/faq/search", json={"query": "when is the lamp lit?"}).json()["hits"]
        assert hits and {h["path"] for h in hits} == {"faq.md"}
        for path in ("/kb/runbooks/search", "/kb/no-such-kb/search"):
            r = call("POST", path, json={"query": f"{SECRET} disk full"})
            assert r.status_code == 404 and r.json()["kind"] == "not_found"
            assert "the ones you may use: faq" in r.json()["error"]
        hidden, missing = (
            call("POST", f"/kb/{n}/search", json={"query": "x y"}).json()["error"] for n in ("runbooks", "nothing")
        )
        assert hidden.replace("runbooks", "NAME") == missing.replace("nothing", "NAME")  # the same answer
        assert call("POST", "/search", json={"query": "office hours"}).status_code == 404  # default: no role
        assert call("POST", "/search", json={"query": "disk", "kbs": ["faq", "runbooks"]}).status_code == 404
        assert (
            call("POST", "/kb/runbooks/ask", json={"question": "what to do when the disk is full?"}).status_code == 404
        )
        assert call("GET", "/kb/runbooks/stats").status_code == 404
        assert call("GET", "/kb/faq/stats").status_code == 200
        assert call("GET", "/stats").status_code == 404
        models = call("GET", "/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["faq"]
        chat = call(
            "POST",
            "/v1/chat/completions",
            json={"model": "runbooks", "messages": [{"role": "user", "content": "what to do when the disk is full?"}]},
        )
        assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"
        answer = call(
            "POST",
            "/v1/chat/completions",
            json={"model": "faq", "messages": [{"role": "user", "content": "when is the lamp lit?"}]},
        ).json()
        assert "sunset" in answer["choices"][0]["message"]["content"]
    assert all(SECRET not in body and "runbooks.md" not in body for body in bodies)
    assert all("Office hours" not in body for body in bodies)


def test_names_bent_towards_another_knowledge_base_reach_nothing(served: Server, kbs: dict[str, str]):
    """Encoded traversal, case, spaces, NUL, look-alike letters, a schema's own name, several names at once: each
    is the same 404 as a name that does not exist, and nothing of runbooks comes back."""
    bent = [
        "RUNBOOKS",
        "Runbooks",
        "runbooks%20",
        "%20runbooks",
        "runbooks%00",
        "runb%C3%B6oks",
        "r%D1%83nbooks",
        "faq%2F..%2Frunbooks",
        "..%2Frunbooks",
        "faq%00runbooks",
        "kb_2",
        "ragvps",
        "runbooks;faq",
        "*",
        "%2A",
        "faq,runbooks",
        "runbooks%0Afaq",
    ]
    with as_faq(served, kbs) as c:
        for name in bent:
            for method, tail, body in (
                ("POST", "search", {"query": f"{SECRET} disk full"}),
                ("POST", "ask", {"question": "what to do when the disk is full?"}),
                ("GET", "stats", None),
                ("GET", "documents", None),
            ):
                r = c.request(method, f"/kb/{name}/{tail}", json=body)
                assert r.status_code in (404, 422), (name, tail, r.status_code, r.text)
                assert SECRET not in r.text and "runbooks.md" not in r.text and "Disk full" not in r.text, (name, tail)
        for model in ("runbooks", "RUNBOOKS", "runbooks ", "ragvps:runbooks", "runbooks:latest", "faq/../runbooks"):
            r = c.post(
                "/v1/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "what to do when the disk is full?"}]},
            )
            assert r.status_code == 404 and SECRET not in r.text, (model, r.text)
        r = c.post("/search", json={"query": f"{SECRET} disk", "kbs": ["faq", "RUNBOOKS"]})
        assert r.status_code == 404 and SECRET not in r.text


def test_mcp_lists_and_serves_only_the_callers_knowledge_bases(served: Server, kbs: dict[str, str]):
    pytest.importorskip("mcp")
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> tuple[list[str], str, str]:
        headers = {"Authorization": f"Bearer {kbs['FAQ_KEY']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(served.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = (await session.list_tools()).tools
            hidden = await session.call_tool("search", {"query": "disk full", "kb": "runbooks"})
            own = await session.call_tool("search", {"query": "when is the lamp lit?", "kb": "faq"})
            return [t.description or "" for t in tools], hidden.content[0].text, own.content[0].text

    descriptions, hidden, own = asyncio.run(asyncio.wait_for(run(), 120))
    assert all("you may read" in d and "faq" in d and "runbooks" not in d for d in descriptions)
    assert "no knowledge base named 'runbooks'" in hidden and SECRET not in hidden and "nomic" not in hidden
    assert "faq.md" in own


def test_an_admin_key_searches_several_knowledge_bases_fused_by_rank(served: Server):
    with served.client() as c:
        names = [k["name"] for k in c.get("/kb").json()["knowledge_bases"]]
        assert set(names) == {"default", "faq", "runbooks", "nomic"}
        hits = c.post(
            "/search", json={"query": "when is the lamp lit? disk full", "k": 6, "kbs": ["faq", "runbooks", "nomic"]}
        ).json()["hits"]
        assert {h["kb"] for h in hits} == {"faq", "runbooks", "nomic"}
        assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
        assert {m["id"] for m in c.get("/v1/models").json()["data"]} == {"ragvps", "faq", "runbooks", "nomic"}


def test_a_768_dimension_model_serves_beside_the_local_one(served: Server, ollama_server):
    with served.client() as c:
        nomic = c.get("/kb/nomic/stats").json()
        local = c.get("/kb/faq/stats").json()
        assert nomic["embedding_set"]["dims"] == 768 and local["embedding_set"]["dims"] == 384
        before = len(ollama_server.requests)
        hits = c.post("/kb/nomic/search", json={"query": "when is the lamp lit?"}).json()["hits"]
        assert hits and hits[0]["path"] == "nomic.md"
        assert len(ollama_server.requests) > before  # the question embedded by the Ollama stand-in
        assert c.post("/kb/faq/search", json={"query": "when is the lamp lit?"}).json()["hits"]


def test_queries_in_one_knowledge_base_do_not_notice_an_ingest_and_a_reindex_in_another(
    served: Server, kbs: dict[str, str]
):
    with served.client() as c:
        before = c.post("/kb/faq/search", json={"query": "when is the lamp lit?"}).json()["hits"]
    failures: list[str] = []
    answers: list[list[str]] = []
    stop = threading.Event()

    def hammer() -> None:
        with served.client() as c:
            deadline = waiting.deadline(120)
            while not stop.is_set() and time.monotonic() < deadline and len(answers) < 2000:
                r = c.post("/kb/faq/search", json={"query": "when is the lamp lit?"})
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")
                else:
                    answers.append([h["chunk_id"] for h in r.json()["hits"]])

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        docs = Path(__file__).resolve().parents[1] / "docs"
        run_cli(kbs, "ingest", str(docs), "--kb", "runbooks")
        run_cli(kbs, "reindex", "--kb", "runbooks")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert failures == [] and len(answers) > 10
    assert all(a == [h["chunk_id"] for h in before] for a in answers)


def test_the_page_offers_only_the_callers_knowledge_bases(browser: Any, served: Server, kbs: dict[str, str]):
    sync_api = playwright()  # for its expect
    page = browser.new_page()
    page.goto(served.url + "/")
    page.fill("#key", KEY)
    page.dispatch_event("#key", "change")
    sync_api.expect(page.locator("#kb option")).to_have_count(4)
    assert page.is_visible("#kb")
    page.select_option("#kb", "runbooks")
    page.fill("#query", "what to do when the disk is full?")
    page.click("#search")
    page.wait_for_selector("#status.done, #status.error")
    assert page.locator("#results > li .path").first.text_content() == "runbooks.md"
    page.fill("#key", kbs["FAQ_KEY"])
    page.dispatch_event("#key", "change")
    sync_api.expect(page.locator("#kb option")).to_have_count(1)
    options = page.locator("#kb option").all_text_contents()
    assert options == ["faq"] and not page.is_visible("#kb")
    page.fill("#query", "when is the lamp lit?")
    page.click("#search")
    page.wait_for_selector("#status.done, #status.error")
    assert {p.text_content() for p in page.locator("#results > li .path").all()} == {"faq.md"}
    assert SECRET not in page.content() and "runbooks" not in page.content()


def test_a_revoked_key_and_a_dropped_knowledge_base_stop_working_within_seconds(served: Server, kbs: dict[str, str]):
    key = run_cli(kbs, "key", "create", "--kb", "nomic", "--role", "read", "--name", "short-lived").strip()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as c:
        assert c.post("/kb/nomic/search", json={"query": "lamp"}).status_code == 200
        run_cli(kbs, "key", "revoke", "short-lived")
        deadline, status = waiting.deadline(10), 200
        while time.monotonic() < deadline and status == 200:
            status = c.post("/kb/nomic/search", json={"query": "lamp"}).status_code
            time.sleep(0.2)
        assert status == 401
    statuses: list[int] = []
    with served.client() as c:
        assert c.post("/kb/nomic/search", json={"query": "lamp"}).status_code == 200
        run_cli(kbs, "kb", "drop", "nomic", "--yes")
        deadline = waiting.deadline(10)
        while time.monotonic() < deadline and (not statuses or statuses[-1] != 404):
            statuses.append(c.post("/kb/nomic/search", json={"query": "lamp"}).status_code)
            time.sleep(0.1)
        assert statuses[-1] == 404 and 500 not in statuses
        assert "no knowledge base named 'nomic'" in c.post("/kb/nomic/ask", json={"question": "lamp?"}).text
        assert "nomic" not in [k["name"] for k in c.get("/kb").json()["knowledge_bases"]]
    assert not (Path(kbs["RAGVPS_DATA_DIR"]) / "kb" / "nomic").exists()
    import psycopg

    with psycopg.connect(kbs["RAGVPS_DATABASE_URL"]) as conn:  # its schema (tables, cache rows) is gone
        kept = {r[0] for r in conn.execute("SELECT schema_name FROM ragvps.knowledge_bases")}
        found = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kb\\_%'")}
        assert found == kept and len(kept) == 3
    with httpx.Client() as raw:
        assert json.loads(raw.get(served.url + "/health").text)["status"] == "ok"

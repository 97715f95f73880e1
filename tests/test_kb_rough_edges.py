"""Knowledge bases and keys as a real client meets them (issue 43): MCP without `kb` for a key scoped elsewhere
(the mcp SDK), an empty `default` not offered as a model, an admin key on every knowledge base, /api/ps, /docs/,
one status for an over-long question (openai and ollama clients), `ragvps chat` rendering Markdown, and an import
into the empty `default` of a fresh database."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from support.asgi_server import InProcess, in_process
from support.serve_server import KEY, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")
ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency: pip install -e '.[test]'")
mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

LIGHTHOUSE = (
    "# The lighthouse keeper's manual\n\n## Lamp\n\nThe lamp is lit at sunset and put out at sunrise by "
    "the keeper on duty.\n\n## Starting the lamp\n\nStart the lamp with this command:\n\n```bash\n"
    "lamp start --bright\n```\n"
)
RUNBOOK = "# Disk full runbook\n\n## Free space\n\nWhen the disk is full, vacuum the journald logs first.\n"


def run_cli(env: dict[str, str], *args: str, expect: int = 0, stdin: str | None = None) -> Any:
    done = CliRunner().invoke(
        cli_app,
        list(args),
        env={k: v for k, v in env.items() if k.startswith("RAGVPS_")},
        input=stdin,
        catch_exceptions=False,
    )
    assert done.exit_code == expect, done.output
    return done


def corpus(root: Path, name: str, text: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / f"{name}.md").write_text(text)
    return root / name


@pytest.fixture(scope="module")
def kbs(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`default` left empty; faq and runbooks with a page each; keys: faq only, faq and runbooks, admin on all."""
    root = tmp_path_factory.mktemp("edges")
    env = ragvps_env(module_db_url, root / "data")
    for name, text in (("faq", LIGHTHOUSE), ("runbooks", RUNBOOK)):
        run_cli(env, "kb", "create", name)
        run_cli(env, "ingest", str(corpus(root, name, text)), "--kb", name)

    def key(*args: str) -> str:
        return str(run_cli(env, "key", "create", *args).stdout.strip())

    return env | {
        "FAQ_KEY": key("--kb", "faq", "--name", "faq-app"),
        "ROOT": str(root),
        "TWO_KEY": key("--kb", "faq", "--kb", "runbooks", "--name", "two"),
    }


@pytest.fixture(scope="module")
def served(kbs: dict[str, str]) -> Any:
    """The server in this process; its own key (`KEY`, from the settings) is admin on everything."""
    env = {k: v for k, v in kbs.items() if not k.endswith("_KEY") and k != "ROOT"}
    with in_process(env | {"RAGVPS_API_KEYS": KEY}) as srv:
        yield srv


def mcp_session(srv: InProcess, key: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any]]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> tuple[dict[str, Any], list[Any]]:
        async with (
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=srv.asgi), timeout=60, headers={"Authorization": f"Bearer {key}"}
            ) as http,
            streamable_http_client(srv.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            return tools, [await session.call_tool(name, args) for name, args in calls]

    return srv.call(lambda: asyncio.wait_for(run(), 120))


def test_mcp_without_kb_asks_the_keys_only_knowledge_base(served: InProcess, kbs: dict[str, str]):
    tools, (found, answer) = mcp_session(
        served,
        kbs["FAQ_KEY"],
        [("search", {"query": "when is the lamp lit?"}), ("ask", {"question": "when is the lamp lit?"})],
    )
    assert not found.is_error, found.content
    assert "faq.md" in found.content[0].text
    assert not answer.is_error and "sunset" in answer.content[0].text
    assert "default 'faq'" in tools["ask"].description


def test_mcp_without_kb_for_a_key_of_several_says_which_it_may_read(served: InProcess, kbs: dict[str, str]):
    tools, (found,) = mcp_session(served, kbs["TWO_KEY"], [("search", {"query": "when is the lamp lit?"})])
    assert found.is_error
    said = found.content[0].text
    assert "faq" in said and "runbooks" in said and "kb" in said, said
    assert "no default for this key" in tools["search"].description


def test_an_empty_default_is_no_model(served: InProcess):
    oa = openai.OpenAI(
        base_url=served.url + "/v1", api_key=KEY, max_retries=0, timeout=60, http_client=served.keyless()
    )
    assert sorted(m.id for m in oa.models.list().data) == ["faq", "runbooks"]  # not the empty default (`ragvps`)
    ol = ollama.Client(
        host=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60, transport=served.transport()
    )
    assert sorted(m.model for m in ol.list().models) == ["faq:latest", "runbooks:latest"]


def test_api_ps_answers_as_ollama_does(served: InProcess):
    ol = ollama.Client(
        host=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60, transport=served.transport()
    )
    running = ol.ps().models  # the loaded models
    assert sorted(m.model for m in running) == ["faq:latest", "runbooks:latest"] and running[0].expires_at


def test_an_admin_key_on_every_knowledge_base(served: InProcess, kbs: dict[str, str]):
    made = run_cli(kbs, "key", "create", "--all-kbs", "--role", "admin", "--name", "ops")
    key = made.stdout.strip()
    assert "every knowledge base" in made.stderr
    run_cli(kbs, "kb", "create", "later")  # the all-KBs key reaches one made after it
    with served.keyless(headers={"Authorization": f"Bearer {key}"}) as c:
        empty = c.get("/kb/later/stats")  # readable (empty: nothing ingested), not 404 as for a key without it
        assert empty.status_code == 400 and "ingest" in empty.json()["error"]
        assert c.get("/metrics").status_code == 200  # admin on every knowledge base
    listed = run_cli(kbs, "key", "list").stdout
    assert "*:admin" in listed


def test_docs_with_a_slash_goes_to_the_docs(served: InProcess):
    r = served.keyless().get("/docs/", follow_redirects=False)
    assert r.status_code in (307, 308) and r.headers["location"] == "../docs"
    assert served.keyless().get("/docs/", follow_redirects=True).status_code == 200


def test_an_over_long_question_is_400_on_both_chat_apis(served: InProcess):
    question = "lamp " * 5000
    asked = [{"role": "user", "content": question}]
    oa = openai.OpenAI(
        base_url=served.url + "/v1", api_key=KEY, max_retries=0, timeout=60, http_client=served.keyless()
    )
    with pytest.raises(openai.BadRequestError):
        oa.chat.completions.create(model="faq", messages=asked)
    ol = ollama.Client(
        host=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60, transport=served.transport()
    )
    for stream in (False, True):
        with pytest.raises(ollama.ResponseError) as caught:
            result = ol.chat(model="faq", messages=asked, stream=stream)
            if stream:
                list(result)
        assert caught.value.status_code == 400 and "characters" in caught.value.error


def test_ragvps_chat_renders_markdown(kbs: dict[str, str]):
    out = run_cli(kbs, "chat", "--kb", "faq", "--markdown", stdin="What starts the lamp?\n").stdout
    assert "lamp start --bright" in out and "```" not in out and "**Sources**" not in out, out
    plain = run_cli(kbs, "chat", "--kb", "faq", "--plain", stdin="What starts the lamp?\n").stdout
    assert "```" in plain and "**Sources**" in plain


def test_import_into_the_empty_default_of_a_fresh_database(kbs: dict[str, str], new_database: Any, tmp_path: Path):
    bundle = tmp_path / "faq.ragvps"
    run_cli(kbs, "export", "--kb", "faq", str(bundle))
    fresh = ragvps_env(new_database("edges_fresh"), tmp_path / "fresh")
    run_cli(fresh, "import", str(bundle), "--kb", "default")  # no --replace: default is empty
    listed = {k["name"]: k["chunks"] for k in json.loads(run_cli(fresh, "kb", "list", "--json").stdout)}
    assert listed["default"] > 0
    other = tmp_path / "runbooks.ragvps"
    run_cli(kbs, "export", "--kb", "runbooks", str(other))
    refused = run_cli(fresh, "import", str(other), "--kb", "default", expect=1)  # now it holds documents
    assert "--replace" in refused.stderr

"""Knowledge bases through the real CLI on a real PostgreSQL: made, listed, renamed and dropped; each its own
documents, index and model; a name that does not exist or may not be used gets an error naming the others."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from ragvps.app import App, AskRequest, SearchRequest
from ragvps.config import Settings
from tests.conftest import DOCS

LIGHTHOUSE = "# The lighthouse keeper's manual\n\n## Lamp\n\nThe lamp is lit at sunset and put out at sunrise.\n"
RUNBOOK = "# Disk full runbook\n\n## Free space\n\nWhen the disk is full, rotate the journald logs first.\n"


def corpus(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / f"{name}.md").write_text(text)
    return folder


def search_json(cli, *args: str) -> list[dict]:
    return json.loads(cli("query", *args, "--json").stdout)


def schemas(db_url: str) -> set[str]:
    with psycopg.connect(db_url) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kb\\_%'")}


def test_each_knowledge_base_holds_only_its_own_documents(cli, tmp_path, db_url):
    cli("kb", "create", "faq")
    cli("kb", "create", "runbooks", "--vector-type", "halfvec")
    cli("ingest", str(corpus(tmp_path, "faq", LIGHTHOUSE)), "--kb", "faq")
    cli("ingest", str(corpus(tmp_path, "runbooks", RUNBOOK)), "--kb", "runbooks")
    faq = search_json(cli, "when is the lamp lit?", "--kb", "faq", "--k", "5")
    runbooks = search_json(cli, "when is the lamp lit?", "--kb", "runbooks", "--k", "5")
    assert {h["path"] for h in faq} == {"faq.md"} and {h["path"] for h in runbooks} == {"runbooks.md"}
    assert cli("query", "lamp", expect=None).exit_code != 0  # default: nothing ingested there
    listed = {r["name"]: r for r in json.loads(cli("kb", "list", "--json").stdout)}
    assert set(listed) == {"default", "faq", "runbooks"}
    assert listed["faq"]["documents"] == 1 and listed["runbooks"]["vector_type"] == "halfvec"
    assert listed["default"]["chunks"] == 0 and listed["faq"]["last_ingest"] is not None
    env = tmp_path / "data" / "kb"
    assert (env / "faq" / "chunks").is_dir() and (env / "runbooks" / "chunks").is_dir()


def test_an_app_reads_only_the_schema_it_is_bound_to(db_url, tmp_path):
    """The isolation itself: an App bound to one knowledge base never sees another's rows. Remove the search_path
    binding (App.connection) and the test database's own default path (the knowledge base default) answers."""
    settings = Settings.of(database_url=db_url, data_dir=tmp_path / "data")
    with App.open(settings) as default:
        default.ingest(corpus(tmp_path, "d", LIGHTHOUSE))
    with App.open(settings, database=False) as admin:
        from ragvps.app.library import Library

        Library(settings, admin.connections).create("faq", {})
    with App.open(settings.replace(kb="faq")) as faq:
        faq.ingest(corpus(tmp_path, "f", RUNBOOK))
        found = faq.search(SearchRequest("when is the lamp lit at sunset?", k=10)).hits
        assert found and {h.path for h in found} == {"f.md"}
        answer = faq.ask(AskRequest("when is the lamp lit at sunset?"))
        assert all(s.path == "f.md" for s in answer.sources)
        assert faq.stats().rows["chunks"] == 1
    from ragvps.app.library import Library

    with Library.open(settings) as library:  # a server's Apps, one a knowledge base: one local model in memory
        apps = library.app("default"), library.app("faq")
        assert apps[0] is not apps[1] and apps[0].embedder.model is apps[1].embedder.model  # type: ignore[attr-defined]


def test_names_duplicates_and_unknown_knowledge_bases_get_clear_errors(cli):
    for bad in ("Bad_name", "a" * 64, "faq!", "-", "über"):
        out = cli("kb", "create", bad, expect=None)
        assert out.exit_code != 0 and "lower-case letters, digits and '-'" in out.stderr, bad
    cli("kb", "create", "faq")
    assert "exists already" in cli("kb", "create", "faq", expect=None).stderr
    missing = cli("query", "x", "--kb", "nope", expect=None)
    assert missing.exit_code != 0 and "no knowledge base named 'nope'" in missing.stderr
    assert "default, faq" in missing.stderr
    bad_env = cli("query", "x", "--kb", "No Such", expect=None)
    assert bad_env.exit_code != 0 and "not a knowledge base name" in bad_env.stderr


def test_drop_asks_loses_nothing_without_yes_and_removes_everything_with_it(cli, tmp_path, db_url):
    cli("kb", "create", "faq")
    cli("ingest", str(corpus(tmp_path, "faq", LIGHTHOUSE)), "--kb", "faq")
    cli("ask", "when is the lamp lit?", "--kb", "faq")  # an answer in its cache
    before = schemas(db_url)
    refused = cli("kb", "drop", "faq", expect=None)  # no terminal to ask on: refused, nothing lost
    assert refused.exit_code != 0 and "--yes" in refused.stderr and schemas(db_url) == before
    assert search_json(cli, "lamp", "--kb", "faq")
    cli("kb", "drop", "faq", "--yes")
    assert len(schemas(db_url)) == len(before) - 1
    assert not (tmp_path / "data" / "kb" / "faq").exists()
    assert "no knowledge base named 'faq'" in cli("query", "lamp", "--kb", "faq", expect=None).stderr
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM ragvps.knowledge_bases WHERE name = 'faq'").fetchone() == (0,)


def test_dropping_default_needs_yes_and_makes_it_again_empty(cli, tmp_path):
    cli("ingest", str(corpus(tmp_path, "d", LIGHTHOUSE)))
    assert cli("kb", "drop", "default", expect=None).exit_code != 0
    assert search_json(cli, "lamp")
    assert "made again, empty" in cli("kb", "drop", "default", "--yes").stdout
    listed = {r["name"]: r for r in json.loads(cli("kb", "list", "--json").stdout)}
    assert listed["default"]["chunks"] == 0


def test_rename_keeps_the_documents_and_the_old_name_is_gone(cli, tmp_path):
    cli("kb", "create", "faq")
    cli("ingest", str(corpus(tmp_path, "faq", LIGHTHOUSE)), "--kb", "faq")
    cli("kb", "rename", "faq", "help-desk")
    assert {h["path"] for h in search_json(cli, "lamp", "--kb", "help-desk")} == {"faq.md"}
    assert cli("query", "lamp", "--kb", "faq", expect=None).exit_code != 0
    assert (tmp_path / "data" / "kb" / "help-desk" / "chunks").is_dir()
    assert "exists already" in cli("kb", "rename", "help-desk", "default", expect=None).stderr


def test_reindex_all_runs_over_every_knowledge_base_one_at_a_time(cli, tmp_path):
    cli("kb", "create", "faq")
    cli("ingest", str(corpus(tmp_path, "faq", LIGHTHOUSE)), "--kb", "faq")
    cli("ingest", str(corpus(tmp_path, "d", RUNBOOK)))
    out = cli("reindex", "--all")
    assert "knowledge base default" in out.stdout and "knowledge base faq" in out.stdout


def test_keys_roles_and_the_last_admin(cli):
    cli("kb", "create", "faq")
    made = cli("key", "create", "--kb", "faq", "--role", "read", "--name", "app1")
    key = made.stdout.strip()
    assert key.startswith("rvk_") and len(key) > 40 and "shown once" in made.stderr
    listed = cli("key", "list").stdout
    assert "app1" in listed and "faq:read" in listed and key not in listed
    bad_role = cli("key", "create", "--kb", "faq", "--role", "owner", expect=None)
    assert bad_role.exit_code != 0 and "read, write, admin" in bad_role.stderr
    unknown_kb = cli("key", "create", "--kb", "nope", expect=None)
    assert unknown_kb.exit_code != 0 and "no knowledge base named 'nope'" in unknown_kb.stderr
    cli("key", "create", "--kb", "faq", "--role", "admin", "--name", "boss")
    last = cli("key", "revoke", "boss", expect=None)
    assert last.exit_code != 0 and "last key with the admin role" in last.stderr
    cli("key", "revoke", "boss", "--yes")
    cli("key", "revoke", "app1")
    assert "no key named 'app1'" in cli("key", "revoke", "app1", expect=None).stderr


def test_the_docs_pages_go_into_a_knowledge_base_of_their_own(cli):
    cli("kb", "create", "docs")
    cli("ingest", str(DOCS), "--kb", "docs")
    hits = search_json(cli, "how do I stop the embedded database?", "--kb", "docs")
    assert hits and hits[0]["path"].endswith(".md")


@pytest.mark.parametrize("name", ["faq", "x", "a-b-1"])
def test_good_names_are_taken(cli, name):
    cli("kb", "create", name)

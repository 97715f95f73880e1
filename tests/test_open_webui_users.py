"""Open WebUI's users in practice (issue 51 part 3), with a real Open WebUI in front of a real `ragvps serve`: sign-in
on, each user's identity forwarded beside one key, each model given to its Open WebUI group as docs/auth.md says.
Two users signed in at once each ask their own knowledge base (Open WebUI keeps ONE model list for all its users,
so each one's refresh of the list used to take the other's model away: "Model not found"), and a user in no group
who is shown a model is told, as the answer, why ragvps will not answer. Slow: skipped where Open WebUI is missing.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.oidc_provider import two_teams
from support.open_webui import open_webui
from support.serve_server import Server, ragvps_here

pytestmark = pytest.mark.slow

PASSWORD = "a-long-enough-test-password"
ROLES = "eng=docs:read,people=hr:read"  # no role:user mapping: an Open WebUI user in no group holds nothing


@pytest.fixture(scope="module")
def ragvps(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    from ragvps.app.identity import User
    from ragvps.app.library import Library
    from ragvps.config import load_settings

    root = tmp_path_factory.mktemp("owui-users")
    env = two_teams(module_db_url, root) | {"RAGVPS_GROUP_ROLES": ROLES, "RAGVPS_FORWARD_USER_KEYS": "owui"}
    made = ragvps_here(env, "key", "create", "--kb", "docs", "--kb", "hr", "--role", "read", "--name", "owui")
    with Library.open(load_settings(env=env)) as library:  # as their sign-ins to ragvps's page would have
        library.identities().seen(User("sub-ana", "ana@example.org", "Ana", ("eng",), "oidc"))
        library.identities().seen(User("sub-bo", "bo@example.org", "Bo", ("people",), "oidc"))
    server = Server(env, root / "serve.log", key=None).start()
    yield server, made.stdout.strip()
    server.stop()


@pytest.fixture(scope="module")
def owui(ragvps: tuple[Server, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, key = ragvps
    settings = {
        "WEBUI_AUTH": "True",
        "OPENAI_API_BASE_URL": server.url + "/v1",
        "OPENAI_API_KEY": key,
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
    }
    with open_webui(Path(tmp_path_factory.mktemp("owui-data")), **settings) as url:
        yield url


def call(url: str, token: str, method: str, path: str, body: Any = None) -> Any:
    r = httpx.request(method, url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=300)
    assert r.status_code == 200, (path, r.status_code, r.text[:2000])
    return r.json()


def set_up(url: str) -> dict[str, str]:
    """The admin, three users, the groups eng (ana) and people (bo), and each model given to its group as
    docs/auth.md says; cy is in no group and is given the docs model alone. Each user's token."""
    admin = httpx.post(
        url + "/api/v1/auths/signup", json={"name": "Admin", "email": "admin@example.org", "password": PASSWORD}
    ).json()["token"]
    ids = {}
    for name in ("ana", "bo", "cy"):
        user = {"name": name.title(), "email": f"{name}@example.org", "password": PASSWORD, "role": "user"}
        ids[name] = call(url, admin, "POST", "/api/v1/auths/add", user)["id"]
    groups = {}
    for group, member in (("eng", "ana"), ("people", "bo")):
        groups[group] = call(url, admin, "POST", "/api/v1/groups/create", {"name": group, "description": group})["id"]
        call(url, admin, "POST", f"/api/v1/groups/id/{groups[group]}/users/add", {"user_ids": [ids[member]]})
    assert {m["id"] for m in call(url, admin, "GET", "/api/models")["data"]} >= {"docs", "hr"}
    for model, grants in (
        ("docs", [("group", groups["eng"]), ("user", ids["cy"])]),
        ("hr", [("group", groups["people"])]),
    ):
        access = [{"principal_type": t, "principal_id": i, "permission": "read"} for t, i in grants]
        body = {"id": model, "name": model, "meta": {}, "params": {}, "access_grants": access}
        call(url, admin, "POST", "/api/v1/models/create", body)
    return {
        name: httpx.post(
            url + "/api/v1/auths/signin", json={"email": f"{name}@example.org", "password": PASSWORD}
        ).json()["token"]
        for name in ("ana", "bo", "cy")
    }


def ask(url: str, token: str, model: str, question: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "stream": False}
    return str(call(url, token, "POST", "/api/chat/completions", body)["choices"][0]["message"]["content"])


def test_two_users_at_once_each_ask_their_own_knowledge_base_and_one_in_no_group_is_told_why(owui: str):
    tokens = set_up(owui)
    listed = {name: {m["id"] for m in call(owui, tokens[name], "GET", "/api/models")["data"]} for name in tokens}
    assert listed == {"ana": {"docs"}, "bo": {"hr"}, "cy": {"docs"}}  # Open WebUI's grants decide what each sees
    questions = [
        ("ana", "docs", "how do I roll back a release?", "previous tag"),
        ("bo", "hr", "how many days of paid leave a year?", "twenty-five"),
    ] * 3
    with concurrent.futures.ThreadPoolExecutor(len(questions)) as pool:  # signed in at once, asking at once
        answers = list(pool.map(lambda q: ask(owui, tokens[q[0]], q[1], q[2]), questions))
        for name in tokens:  # each refresh of the one model list, meanwhile
            call(owui, tokens[name], "GET", "/api/models")
    for (_, _, _, expected), answer in zip(questions, answers, strict=True):
        assert expected in answer, answer
    told = ask(owui, tokens["cy"], "docs", "how do I roll back a release?")
    assert "You cannot ask this knowledge base (docs)" in told and "cy@example.org" in told, told
    assert "previous tag" not in told

"""People besides keys, against `create_app` in this process and a provider of the test's own
(support/oidc_provider.py):
bearer tokens from the identity provider (good, expired, for another audience, from another issuer, tampered, from a
rotated key), roles from groups with wildcards, a user whose groups map to nothing, a chat front end's forwarded
user (the openai SDK's view of /v1/models), the audit log and `ragvps audit`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.oidc_provider import TokenIssuer, two_teams
from support.serve_server import KEY, ragvps_here

ROLES = "eng=docs:read,people=hr:write,admins=*:admin,role:user=docs:read"


@pytest.fixture(scope="module")
def issuer() -> Iterator[TokenIssuer]:
    found = TokenIssuer()
    yield found
    found.close()


@pytest.fixture(scope="module")
def env(module_db_url: str, tmp_path_factory: pytest.TempPathFactory, issuer: TokenIssuer) -> dict[str, str]:
    env = two_teams(module_db_url, tmp_path_factory.mktemp("people"))
    made = ragvps_here(env, "key", "create", "--kb", "docs", "--kb", "hr", "--role", "read", "--name", "owui")
    other = ragvps_here(env, "key", "create", "--kb", "docs", "--kb", "hr", "--role", "read", "--name", "plain")
    return env | {
        "RAGVPS_API_KEYS": KEY,
        "RAGVPS_OIDC_ISSUER": issuer.url,
        "RAGVPS_OIDC_CLIENT_ID": "ragvps",
        "RAGVPS_GROUP_ROLES": ROLES,
        "RAGVPS_FORWARD_USER_KEYS": "owui",
        "RAGVPS_LOG_QUESTIONS": "false",
        "OWUI_KEY": made.stdout.strip(),
        "PLAIN_KEY": other.stdout.strip(),
    }


@pytest.fixture(scope="module")
def srv(env: dict[str, str]) -> Iterator[InProcess]:
    server = InProcess(env, key=None).start()
    yield server
    server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def kbs_of(srv: InProcess, headers: dict[str, str]) -> httpx.Response:
    with srv.keyless() as c:
        return c.get("/kb", headers=headers)


def names(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [kb["name"] for kb in response.json()["knowledge_bases"]]


def test_a_token_from_the_provider_gives_the_roles_of_its_groups(srv: InProcess, issuer: TokenIssuer):
    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"])))) == ["docs"]
    assert names(kbs_of(srv, bearer(issuer.token("bo", groups=["eng", "people"])))) == ["docs", "hr"]
    assert names(kbs_of(srv, bearer(issuer.token("cy", groups=["admins"])))) == ["default", "docs", "hr"]
    with srv.keyless(headers=bearer(issuer.token("ana", groups=["eng"]))) as c:
        hits = c.post("/kb/docs/search", json={"query": "how do I roll back a release?"}).json()["hits"]
        assert hits and hits[0]["path"] == "docs.md"
        refused = c.post("/kb/hr/search", json={"query": "paid leave"})
        assert refused.status_code == 404 and "hr.md" not in refused.text and "twenty-five" not in refused.text
        # read is not write: eng may not upload into docs
        upload = c.post("/kb/docs/documents", files={"files": ("x.md", b"# x\n\ntext\n")})
        assert upload.status_code in (403, 404), upload.text


def test_a_user_whose_groups_map_to_nothing_is_told_so(srv: InProcess, issuer: TokenIssuer):
    refused = kbs_of(srv, bearer(issuer.token("dee", groups=["sales"])))
    assert refused.status_code == 403
    body = refused.json()
    assert body["kind"] == "forbidden" and "dee@example.org" in body["error"] and "group_roles" in body["error"]


@pytest.mark.parametrize("case", ["expired", "audience", "issuer", "tampered", "foreign key", "alg none"])
def test_bad_tokens_are_refused_with_the_reason(srv: InProcess, issuer: TokenIssuer, case: str):
    from joserfc.jwk import RSAKey

    good = issuer.token("ana", groups=["admins"])
    token = {
        "expired": lambda: issuer.token("ana", groups=["admins"], expires_in=-3600),
        "audience": lambda: issuer.token("ana", groups=["admins"], aud="another-app"),
        "issuer": lambda: issuer.token("ana", groups=["admins"], iss="http://127.0.0.1:9/other"),
        "tampered": lambda: _tamper(good),
        "foreign key": lambda: issuer.token(
            "ana", groups=["admins"], key=RSAKey.generate_key(2048, parameters={"kid": "key-1"})
        ),
        "alg none": lambda: _unsigned(good),
    }[case]()
    refused = kbs_of(srv, bearer(token))
    assert refused.status_code == 401, (case, refused.text)
    assert refused.json()["kind"] == "unauthorized" and "www-authenticate" in refused.headers
    assert {"expired": "expired", "audience": "audience", "issuer": "iss"}.get(case, "refused") in refused.text


def test_clock_skew_within_the_leeway_is_accepted(srv: InProcess, issuer: TokenIssuer):
    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"], expires_in=-20)))) == ["docs"]


def test_a_rotated_signing_key_is_fetched_once_and_accepted(srv: InProcess, issuer: TokenIssuer):
    from joserfc.jwk import RSAKey

    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"])))) == ["docs"]
    before = issuer.fetches
    issuer.rotate()
    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"], nonce="x")))) == ["docs"]
    assert issuer.fetches == before + 1
    forged = RSAKey.generate_key(2048, parameters={"kid": "made-up"})
    for _ in range(5):  # a forged key id does not make the server fetch the JWKS again and again
        assert kbs_of(srv, bearer(issuer.token("ana", key=forged))).status_code == 401
    assert issuer.fetches <= before + 2


def _tamper(token: str) -> str:
    import base64

    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["groups"] = ["admins", "people"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{sig}"


def _unsigned(token: str) -> str:
    import base64

    _, body, _ = token.split(".")
    head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    return f"{head}.{body}."


# --- a chat front end that forwards its user ---------------------------------------------------------------


def owui_models(srv: InProcess, key: str, **user: str) -> list[str]:
    headers = {f"X-OpenWebUI-User-{k.title()}": v for k, v in user.items()}
    with srv.keyless(headers=headers) as http:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, http_client=http)
        return sorted(m.id for m in client.models.list())


def owui_chat(srv: InProcess, key: str, model: str, email: str, stream: bool = False) -> str:
    headers = {"X-OpenWebUI-User-Email": email, "X-OpenWebUI-User-Role": "user"}
    with srv.keyless(headers=headers) as http:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, http_client=http, max_retries=0)
        messages = [{"role": "user", "content": "how many days of paid leave?"}]
        done = client.chat.completions.create(model=model, messages=messages, stream=stream)  # type: ignore[call-overload]
        if stream:
            return "".join(c.choices[0].delta.content or "" for c in done if c.choices)
        return str(done.choices[0].message.content)


def test_a_forwarded_user_is_listed_the_keys_models_and_answered_by_their_groups(
    srv: InProcess, env: dict[str, str], issuer: TokenIssuer
):
    # Open WebUI keeps ONE model list for all its users (app.state.MODELS): a per-user list would be overwritten by
    # the next user's refresh, so every user of the key is listed the key's models, and the chat decides (issue 51).
    from ragvps.app.identity import User
    from ragvps.app.library import Library
    from ragvps.config import load_settings

    with Library.open(load_settings(env=env)) as library:
        library.identities().seen(User("sub-ana", "ana@example.org", "Ana", ("eng",), "oidc"))
        library.identities().seen(User("sub-cy", "cy@example.org", "Cy", ("admins",), "oidc"))
    key = env["OWUI_KEY"]
    assert owui_models(srv, key) == ["docs", "hr"]  # the key alone: what it grants
    for email in ("ana@example.org", "new@example.org", "cy@example.org", "nobody@example.org"):
        assert owui_models(srv, key, email=email, name="X", role="user") == ["docs", "hr"]
    # cy (admins=*:admin, bounded by the key's read) reads hr; ana (eng) is told why not, and sees none of it
    assert "twenty-five" in owui_chat(srv, key, "hr", "cy@example.org")
    for stream in (False, True):
        said = owui_chat(srv, key, "hr", "ana@example.org", stream)
        assert "twenty-five" not in said and "You cannot ask this knowledge base (hr)" in said, said
        assert "ana@example.org" in said and "GROUP=hr:read" in said
    with srv.keyless(headers={"Authorization": f"Bearer {key}", "X-OpenWebUI-User-Email": "cy@example.org"}) as c:
        assert c.post("/kb/docs/documents", files={"files": ("x.md", b"# x\n\ntext\n")}).status_code in (403, 404)
    with srv.keyless(headers={"Authorization": f"Bearer {key}", "X-OpenWebUI-User-Email": "ana@example.org"}) as c:
        assert c.post("/kb/hr/search", json={"query": "paid leave"}).status_code == 404  # search: no door opened


def test_a_forwarded_user_with_no_groups_is_told_why_in_the_chat_and_refused_elsewhere(
    srv: InProcess, env: dict[str, str]
):
    key, roles = env["OWUI_KEY"], "eng=docs:read,people=hr:write"  # no role:user mapping: a new user holds nothing
    server = InProcess(env | {"RAGVPS_GROUP_ROLES": roles}, key=None).start()
    try:
        said = owui_chat(server, key, "docs", "stranger@example.org", stream=True)
        assert "You cannot ask this knowledge base (docs)" in said and "in no group that" in said, said
        headers = {"Authorization": f"Bearer {key}", "X-OpenWebUI-User-Email": "stranger@example.org"}
        with server.keyless(headers=headers) as c:
            refused = c.post("/kb/docs/search", json={"query": "anything"})
        assert refused.status_code == 403 and "holds no role on any knowledge base" in refused.text
    finally:
        server.stop()


def test_forwarded_headers_beside_another_key_are_ignored(srv: InProcess, env: dict[str, str]):
    assert owui_models(srv, env["PLAIN_KEY"], email="ana@example.org", role="user") == ["docs", "hr"]


def test_no_credentials_asks_for_a_key_or_a_sign_in(srv: InProcess):
    refused = kbs_of(srv, {})
    assert refused.status_code == 401 and "/auth/login" in refused.json()["error"]
    with srv.keyless() as c:
        me = c.get("/auth/me").json()
        assert me == {"sign_in": True, "signed_in": False}


# --- the audit log -----------------------------------------------------------------------------------------


def test_the_audit_names_who_did_what_where_and_never_the_question(
    srv: InProcess, env: dict[str, str], issuer: TokenIssuer
):
    with srv.keyless(headers=bearer(issuer.token("auditee", groups=["eng"]))) as c:
        assert c.post("/kb/docs/search", json={"query": "secret-question-words rollback"}).status_code == 200
        assert c.post("/kb/hr/search", json={"query": "leave"}).status_code == 404
    with srv.keyless(headers={"Authorization": f"Bearer {KEY}"}) as c:
        assert c.post("/kb/hr/ask", json={"question": "how many days of leave?"}).status_code == 200
    rows: list[dict[str, object]] = []
    deadline = waiting.deadline(10)
    while time.monotonic() < deadline:  # written by the audit's thread within half a second
        done = ragvps_here(env, "audit", "--since", "1h", "--json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        if len(rows) >= 3 and any(r["who"] == "settings key" for r in rows):
            break
        time.sleep(0.2)
    mine = [r for r in rows if "auditee" in str(r["who"])]
    assert {(r["action"], r["kb"], r["status"]) for r in mine} >= {("search", "docs", 200), ("search", "hr", 404)}
    assert mine[0]["who"] == "user auditee@example.org (oidc)" and mine[0]["request"]
    assert any(r["who"] == "settings key" and r["action"] == "ask" and r["kb"] == "hr" for r in rows)
    assert "secret-question-words" not in done.stdout
    text = ragvps_here(env, "audit", "--since", "1h", "--who", "auditee", "--kb", "hr")
    assert text.returncode == 0 and "auditee" in text.stdout and " docs " not in text.stdout


def test_audit_rows_older_than_audit_days_are_removed(env: dict[str, str], tmp_path: Path):
    import psycopg

    from ragvps.app.audit import AuditEvent
    from ragvps.app.library import Library
    from ragvps.config import load_settings

    with Library.open(load_settings(env=env)) as library:
        library.audit().record([AuditEvent("key old", "search", "docs", 200, "/kb/{name}/search")])
    with psycopg.connect(env["RAGVPS_DATABASE_URL"], autocommit=True) as conn:
        conn.execute("UPDATE ragvps.audit SET at = now() - interval '100 days' WHERE who = 'key old'")
    done = ragvps_here(env, "audit", "--since", "52w", "--who", "key old", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == []


# --- issue 50: forwarded users' own groups, control characters, sign-out revokes ---------------------------


def test_a_forwarded_user_never_takes_another_sessions_groups(srv: InProcess, env: dict[str, str]):
    from ragvps.app.identity import User
    from ragvps.app.library import Library
    from ragvps.config import load_settings

    with Library.open(load_settings(env=env)) as library:
        library.identities().seen(User("sub-dee", "dee@example.org", "Dee", ("eng",), "oidc"))
        # the key's models are listed to every user (issue 51); what a user may ask, the chat says
        said = owui_chat(srv, env["OWUI_KEY"], "hr", "dee@example.org")
        assert "You cannot ask this knowledge base (hr)" in said and "twenty-five" not in said  # her own: eng
        # someone else shows up with dee's address (another subject, later): neither record speaks for dee now
        library.identities().seen(User("proxy:mallory", "DEE@example.org", "Mallory", ("admins",), "proxy"))
    said = owui_chat(srv, env["OWUI_KEY"], "hr", "dee@example.org")
    assert "You cannot ask this knowledge base (hr)" in said and "twenty-five" not in said  # never mallory's admins
    assert "You cannot ask" not in owui_chat(srv, env["OWUI_KEY"], "docs", "dee@example.org")  # role:user reads docs


def test_control_characters_neither_forge_audit_rows_nor_names(
    srv: InProcess, env: dict[str, str], issuer: TokenIssuer
):
    from ragvps.app.identity import User
    from ragvps.app.library import Library
    from ragvps.config import load_settings

    forged = "2026-01-01 00:00:00  settings key"
    with srv.keyless(headers={"Authorization": f"Bearer {KEY}"}) as c:
        assert c.post("/kb/x%0A" + forged.replace(" ", "%20") + "/search", json={"query": "q"}).status_code == 404
    token = issuer.token("nl", groups=["eng"], email="nl@example.org\n" + forged)
    assert kbs_of(srv, bearer(token)).status_code == 401
    with Library.open(load_settings(env=env)) as library:  # a row written before names were checked
        library.identities().seen(User("sub-nl", "nl@example.org\n" + forged, "NL", ("eng",), "proxy"))
    deadline = waiting.deadline(60)
    while time.monotonic() < deadline and "x\\n2026" not in (text := ragvps_here(env, "audit", "--since", "1h").stdout):
        time.sleep(0.2)
    assert "x\\n2026" in text and not any(line.startswith(forged) for line in text.splitlines())
    users = ragvps_here(env, "users").stdout
    assert "nl@example.org\\n2026" in users and not any(line.startswith(forged) for line in users.splitlines())


def test_signing_out_revokes_the_session_cookie(srv: InProcess, env: dict[str, str]):
    from ragvps.app.identity import User
    from ragvps.app.library import Library
    from ragvps.config import load_settings
    from ragvps.serve.gate.session import Signer, seed_key, session_payload

    settings = load_settings(env=env)
    with Library.open(settings) as library:  # the key every server on this database signs with
        key = library.identities().session_key(seed_key(settings))
    value = Signer(key).dump(session_payload(User("sub-eve", "eve@example.org", "Eve", ("eng",))), 3600)
    with srv.keyless(cookies={"ragvps_session": value}) as c:
        assert names(c.get("/kb")) == ["docs"]
        assert c.post("/auth/logout", follow_redirects=False).status_code == 303
    with srv.keyless(cookies={"ragvps_session": value}) as copy:  # a copy of the cookie, kept by someone
        assert copy.get("/kb").status_code == 401


def test_an_unknown_key_id_never_holds_a_token_whose_key_is_known(srv: InProcess, issuer: TokenIssuer):
    import threading

    from joserfc.jwk import RSAKey

    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"])))) == ["docs"]  # its key is known
    forged = [issuer.token("ana", key=RSAKey.generate_key(2048, parameters={"kid": f"forged-{n}"})) for n in range(5)]
    valid = issuer.token("ana", groups=["eng"], nonce="fresh")
    issuer.jwks_gate = threading.Event()  # the provider hangs on the JWKS: a fetch for the forged kids waits
    done: dict[str, int] = {}
    try:
        threads = [threading.Thread(target=lambda t=t: kbs_of(srv, bearer(t))) for t in forged]
        for thread in threads:
            thread.start()
        deadline = waiting.deadline(30)
        while issuer.fetches == 0 or not any(t.is_alive() for t in threads):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        checker = threading.Thread(target=lambda: done.setdefault("status", kbs_of(srv, bearer(valid)).status_code))
        checker.start()
        checker.join(30)  # the JWKS still hangs: only a request that waits on nobody's fetch ends here
        assert done.get("status") == 200, done
    finally:
        issuer.jwks_gate.set()
        issuer.jwks_gate = None
    for thread in threads:
        thread.join(60)


def test_a_provider_without_key_ids_survives_its_key_rotation(srv: InProcess, issuer: TokenIssuer):
    assert names(kbs_of(srv, bearer(issuer.token("ana", groups=["eng"], with_kid=False)))) == ["docs"]
    issuer.rotate()
    deadline = waiting.deadline(20)  # the keys are fetched again at most once a second
    while (status := kbs_of(srv, bearer(issuer.token("ana", groups=["eng"], with_kid=False))).status_code) != 200:
        assert status == 401 and time.monotonic() < deadline, status
        time.sleep(0.2)


def test_the_providers_discovery_cannot_send_the_server_to_an_internal_address(env: dict[str, str]):
    other = TokenIssuer()
    try:
        port = other.url.rsplit(":", 1)[1]
        other.url = f"http://localhost:{port}"  # the issuer the server's configuration names: its host trusted
        other.jwks_url = f"http://127.0.0.1:{port}/jwks"  # another host than the issuer's, on loopback
        token = other.token("ana", groups=["eng"])
        settings = env | {"RAGVPS_OIDC_ISSUER": other.url}
        server = InProcess(settings, key=None).start()
        try:
            refused = kbs_of(server, bearer(token))
            assert refused.status_code == 503 and "source_allow_hosts" in refused.text, refused.text
            assert other.fetches == 0
        finally:
            server.stop()
        server = InProcess(settings | {"RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"}, key=None).start()
        try:
            assert names(kbs_of(server, bearer(token))) == ["docs"]  # the server's owner allows it
        finally:
            server.stop()
    finally:
        other.close()


def test_a_chat_clients_background_task_is_audited_with_its_knowledge_base(srv: InProcess, env: dict[str, str]):
    """Open WebUI's title task searches nothing; its audit row still names the knowledge base (issue 51)."""
    from support import client_bodies as cb

    body = cb.owui_task_body(cb.owui_title(cb.history(("user", "how do I roll back a release?"))), model="docs")
    with srv.keyless(headers={"Authorization": f"Bearer {KEY}", "X-Request-Id": "title-task-1"}) as c:
        assert c.post("/v1/chat/completions", json=body).status_code == 200
    rows = waiting.wait_until(
        lambda: (
            [
                r
                for r in json.loads(ragvps_here(env, "audit", "--since", "1h", "--json").stdout)
                if r["action"] == "chat"
            ]
            or None
        ),
        "the title task's audit row",
    )
    assert any(r["kb"] == "docs" for r in rows), rows  # af33e0a: kb null

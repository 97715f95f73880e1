"""Identity providers for the sign-in tests.

- `TokenIssuer`: a small OpenID provider of the test's own on 127.0.0.1 (a real HTTP server with a discovery
  document and a JWKS) that signs whatever tokens a test asks for: expired ones, ones for another audience, ones
  from another issuer's key, tampered ones; `rotate()` replaces its signing key as a provider does.
- `mock_provider()`: oidc-provider-mock (PyPI), a real OpenID Connect provider with the authorization-code flow,
  for the browser's sign-in; `set_user` gives a user claims (their groups).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from support.serve_server import ragvps_env, ragvps_here


class TokenIssuer:
    def __init__(self) -> None:
        self.keys = [RSAKey.generate_key(2048, parameters={"kid": "key-1"})]
        self.fetches = 0  # how often the JWKS was read
        self.jwks_gate: threading.Event | None = None
        self.jwks_url: str | None = None  # where the discovery document says the keys are (default: here)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {
                        "issuer": issuer.url,
                        "jwks_uri": issuer.jwks_url or issuer.url + "/jwks",
                        "authorization_endpoint": issuer.url + "/authorize",
                        "token_endpoint": issuer.url + "/token",
                    }
                elif self.path == "/jwks":
                    issuer.fetches += 1
                    if issuer.jwks_gate is not None:  # a slow provider: the JWKS waits until the test opens it
                        issuer.jwks_gate.wait(60)
                    body = KeySet(list(issuer.keys)).as_dict(private=False)
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(
        self,
        sub: str = "alice",
        *,
        groups: list[str] | None = None,
        aud: str = "ragvps",
        iss: str | None = None,
        expires_in: float = 300,
        key: RSAKey | None = None,
        with_kid: bool = True,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        body = {
            "iss": iss or self.url,
            "sub": sub,
            "aud": aud,
            "iat": now,
            "exp": now + int(expires_in),
            "email": f"{sub}@example.org",
            "groups": groups or [],
            **claims,
        }
        key = key or self.keys[-1]
        header = {"alg": "RS256", "kid": key.kid} if with_kid else {"alg": "RS256"}
        return jwt.encode(header, body, key)

    def rotate(self) -> None:
        """A new signing key (`key-N`), the old one dropped from the JWKS, as providers rotate."""
        self.keys = [RSAKey.generate_key(2048, parameters={"kid": f"key-{len(self.keys) + 1}"})]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def mock_provider() -> Iterator[str]:
    """oidc-provider-mock on 127.0.0.1, its issuer URL yielded."""
    from oidc_provider_mock import run_server_in_thread

    with run_server_in_thread(port=0) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def set_user(issuer: str, sub: str, **claims: Any) -> None:
    httpx.put(f"{issuer}/users/{sub}", json={"email": f"{sub}@example.org", **claims}, timeout=10).raise_for_status()


DOCS = "# Deploying\n\n## Rollback\n\nTo roll back a release, run the deploy script with the previous tag.\n"
HR = "# Holidays\n\n## Leave\n\nEvery employee has twenty-five days of paid leave a year.\n"


def two_teams(database_url: str, root: Path) -> dict[str, str]:
    """The environment of a data directory under `root` whose database holds two knowledge bases a group each may
    read: `docs` (how to roll back a release) and `hr` (the leave allowance), each ingested by the real CLI."""
    env = ragvps_env(database_url, root / "data")
    for name, text in (("docs", DOCS), ("hr", HR)):
        (root / name).mkdir()
        (root / name / f"{name}.md").write_text(text)
        assert ragvps_here(env, "kb", "create", name).returncode == 0
        done = ragvps_here(env, "ingest", str(root / name), "--kb", name)
        assert done.returncode == 0, done.stderr
    return env

"""What a person costs over a key (issue 44): one request to GET /kb through `create_app` in this process, with

- a key from the settings (api_keys), and one made with `ragvps key create` (its hash looked up, cached 2 s);
- the page's session cookie (its HMAC checked, its groups mapped to roles);
- a bearer JWT from the identity provider (RS256: the first checks the signature, later ones find it remembered);
- a trusted proxy's user headers.

    python bench/auth_bench.py [--requests 2000] [--rounds 3]

A provider of the bench's own (discovery and JWKS on 127.0.0.1) signs the token. Each round times every way in turn,
`--requests` requests each; the figure is the median per request over the rounds, and the difference from the
settings key. Figures go to bench/RESULTS.md, section "auth_bench".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import OUT as BENCH_OUT
from common.databases import fresh
from common.results import write_section
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from ragvps.app.identity import User
from ragvps.app.library import Library
from ragvps.config import load_settings
from ragvps.db.embedded import embedded_url
from ragvps.serve.gate.session import SESSION_COOKIE, Signer, session_payload

KEY = "bench-settings-key-0123456789"


def provider(key: RSAKey) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = f"http://127.0.0.1:{self.server.server_address[1]}"
            body = (
                {"issuer": url, "jwks_uri": url + "/jwks"}
                if "openid" in self.path
                else KeySet([key]).as_dict(private=False)
            )
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from ragvps.serve.http import create_app
    from ragvps.serve.shared.lifecycle import for_serving

    data = BENCH_OUT / "auth"
    base = load_settings(env={"RAGVPS_DATA_DIR": str(data)})
    url = fresh(embedded_url(base), "auth_bench")
    signing = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    server, issuer = provider(signing)
    env = {
        "RAGVPS_DATA_DIR": str(data),
        "RAGVPS_DATABASE_URL": url,
        "RAGVPS_API_KEYS": KEY,
        "RAGVPS_OIDC_ISSUER": issuer,
        "RAGVPS_OIDC_CLIENT_ID": "ragvps",
        "RAGVPS_GROUP_ROLES": "eng=docs:read",
        "RAGVPS_TRUSTED_PROXIES": "127.0.0.1/32",
        "RAGVPS_LOG_FORMAT": "off",
    }
    settings = for_serving(load_settings(env=env))
    with Library.open(settings) as library:
        library.create("docs", {})
        catalog_key = library.keys().create("bench", [("docs", "read")])
    now = int(time.time())
    token = jwt.encode(
        {"alg": "RS256", "kid": "k1"},
        {"iss": issuer, "sub": "ana", "aud": "ragvps", "iat": now, "exp": now + 3600, "groups": ["eng"]},
        signing,
    )
    cookie = Signer.for_settings(settings).dump(session_payload(User("ana", "ana@x", None, ("eng",))), 3600)
    ways = {
        "settings key": {"Authorization": f"Bearer {KEY}"},
        "catalog key": {"Authorization": f"Bearer {catalog_key}"},
        "session cookie": {"Cookie": f"{SESSION_COOKIE}={cookie}"},
        "bearer JWT": {"Authorization": f"Bearer {token}"},
        "proxy headers": {"Remote-User": "ana", "Remote-Groups": "eng"},
    }
    timings: dict[str, list[float]] = {name: [] for name in ways}
    load_before = os.getloadavg()
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 50000)) as client:
        while client.get("/health").status_code != 200:
            time.sleep(0.05)
        for headers in ways.values():  # warm: the JWKS fetched, the token remembered, the key looked up
            assert client.get("/kb", headers=headers).status_code == 200
        names = list(ways)
        for r in range(args.rounds * len(names)):  # each way first in turn: blocks of requests, interleaved
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.perf_counter()
                for _ in range(args.requests // len(names)):
                    client.get("/kb", headers=ways[name])
                timings[name].append((time.perf_counter() - start) / (args.requests // len(names)) * 1000)
        cold = []
        for i in range(20):  # a token never seen: the RS256 signature checked
            fresh_token = jwt.encode(
                {"alg": "RS256", "kid": "k1"},
                {"iss": issuer, "sub": f"u{i}", "aud": "ragvps", "iat": now, "exp": now + 3600, "groups": ["eng"]},
                signing,
            )
            start = time.perf_counter()
            assert client.get("/kb", headers={"Authorization": f"Bearer {fresh_token}"}).status_code == 200
            cold.append((time.perf_counter() - start) * 1000)
    server.shutdown()
    base_ms = statistics.median(timings["settings key"])
    rows = [
        f"| {name} | {statistics.median(t):.3f} | {statistics.median(t) - base_ms:+.3f} |"
        for name, t in timings.items()
    ]
    rows.append(
        f"| bearer JWT never seen (RS256 checked), median of 20 | {statistics.median(cold):.3f} | "
        f"{statistics.median(cold) - base_ms:+.3f} |"
    )
    section = "\n".join(
        [
            "<!-- auth_bench:start -->",
            "## auth_bench: what a person costs over a key (issue 44)",
            "",
            f"`python bench/auth_bench.py --requests {args.requests} --rounds {args.rounds}`, "
            f"{time.strftime('%Y-%m-%d')}, "
            f"2 cores, under `flock -x /work/quiet.lock`; load average before {load_before[0]:.2f}, after "
            f"{os.getloadavg()[0]:.2f}. GET /kb through create_app in process (starlette's TestClient), median ms per "
            "request over the rounds; the difference is from the settings key.",
            "",
            "| credentials | ms per request | over a settings key |",
            "|---|---|---|",
            *rows,
            "",
            "<!-- auth_bench:end -->",
        ]
    )
    write_section("auth_bench", section)
    print(section)


if __name__ == "__main__":
    main()

"""A client nobody here wrote: schemathesis generates requests from the server's own /openapi.json (with a
key) and checks every answer: no 5xx, and status, content type, headers and body as the document says."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.serve_server import KEY, Server, ragvps_env, ragvps_here

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
]
# Not `positive_data_acceptance`: the server refuses some schema-valid values on purpose (a query with no
# words, text with NUL characters PostgreSQL cannot store), which JSON Schema cannot say exactly.


# A body over max_body_bytes is refused with 413 before it is read: a rejection like 400 is.
REJECTIONS = (
    '[checks.negative_data_rejection]\nexpected-statuses = ["400", "401", "403", "404", "405", "406", "409", '
    '"413", "415", "422", "428", "429", "5xx"]\n'
)


def schemathesis(server: Server, folder: Path, config: str, *args: str) -> str:
    """Run schemathesis against the server's /openapi.json with its key; its output, checked to have passed."""
    pytest.importorskip("schemathesis", reason="schemathesis is not installed: pip install '.[test]'")
    command = [sys.executable, "-m", "schemathesis.cli"] if not shutil.which("schemathesis") else ["schemathesis"]
    (folder / "schemathesis.toml").write_text(config)
    done = subprocess.run(
        [
            *command,
            "--config-file",
            str(folder / "schemathesis.toml"),
            "run",
            server.url + "/openapi.json",
            "--header",
            f"Authorization: Bearer {server.key}",
            "--checks",
            ",".join(CHECKS),
            "--seed",
            "13",
            "--workers",
            "1",
            "--request-timeout",
            "60",
            "--output-sanitize",
            "true",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=folder,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert server.key not in out
    return out


def test_schemathesis_finds_no_server_errors_and_no_schema_breaks(server: Server, tmp_path):
    out = schemathesis(
        server,
        tmp_path,
        REJECTIONS,
        "--max-examples",
        "25",
        "--phases",
        "examples,coverage,fuzzing",
        # Not the routes that add or remove documents: the shared server's corpus stays what the
        # other tests read (the next test gives them a server of their own).
        "--exclude-name-regex",
        r"^(POST|DELETE) /kb/\{name\}/documents",
    )
    generated = re.search(r"(\d+) generated", out)
    assert generated and int(generated.group(1)) >= 50, out[-2000:]


def test_schemathesis_on_the_upload_delete_and_job_routes(db_url: str, tmp_path):
    """Uploads (multipart files of any bytes, JSON texts), document deletes and jobs, on a server of their own whose
    knowledge base `default` is the one named; the job ids come from the uploads' answers (their Location)."""
    env = ragvps_env(db_url, tmp_path / "data", upload_max_files="20", upload_max_file_bytes=str(256 << 10))
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "seed.md").write_text("# Seed\n\nA page for the knowledge base to start from.\n")
    assert ragvps_here(env, "ingest", str(tmp_path / "seed")).returncode == 0
    srv = Server(env | {"RAGVPS_API_KEYS": KEY}, tmp_path / "serve.log", key=KEY).start()
    try:
        out = schemathesis(
            srv,
            tmp_path,
            REJECTIONS + '\n[parameters]\n"path.name" = "default"\n',
            "--max-examples",
            "15",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--include-path-regex",
            r"^/(kb/\{name\}/documents|jobs/)",
        )
    finally:
        srv.stop()
    tested = re.search(r"(\d+) generated", out)
    assert tested and int(tested.group(1)) >= 30, out[-2000:]
    assert re.search(r"Selected: 6/\d+\s+Tested: 6\b", out), out[-2000:]  # POST, GET, DELETE documents; the jobs'
    assert re.search(r"Scenarios: +[1-9]", out), out[-2000:]  # uploads followed to their jobs

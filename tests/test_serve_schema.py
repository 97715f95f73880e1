"""A client nobody here wrote: schemathesis generates requests from the server's own /openapi.json (with a
key) and checks every answer: no 5xx, and status, content type, headers and body as the document says."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from serve_server import Server

CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance", "negative_data_rejection"]
# Not `positive_data_acceptance`: the server refuses some schema-valid values on purpose (a query with no
# words, text with NUL characters PostgreSQL cannot store), which JSON Schema cannot say exactly.


def test_schemathesis_finds_no_server_errors_and_no_schema_breaks(server: Server, tmp_path):
    pytest.importorskip("schemathesis", reason="schemathesis is not installed: pip install '.[test]'")
    command = [sys.executable, "-m", "schemathesis.cli"] if not shutil.which("schemathesis") else ["schemathesis"]
    # A body over max_body_bytes is refused with 413 before it is read: a rejection like 400 is.
    config = tmp_path / "schemathesis.toml"
    config.write_text('[checks.negative_data_rejection]\nexpected-statuses = ["400", "401", "403", "404", "405", '
                      '"406", "409", "413", "415", "422", "428", "429", "5xx"]\n')
    done = subprocess.run(
        [*command, "--config-file", str(config), "run", server.url + "/openapi.json",
         "--header", f"Authorization: Bearer {server.key}",
         "--checks", ",".join(CHECKS), "--max-examples", "25", "--seed", "13", "--workers", "1",
         "--phases", "examples,coverage,fuzzing", "--request-timeout", "60", "--output-sanitize", "true",
         # Not the routes that add or remove documents: the shared server's corpus stays what the other tests read.
         "--exclude-name-regex", r"^(POST|DELETE) /kb/\{name\}/documents"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    generated = re.search(r"(\d+) generated", out)
    assert generated and int(generated.group(1)) >= 50, out[-2000:]
    assert server.key not in out

"""The files of the real compose start (deploy/smoke.sh, deploy/smoke/) and the commands users copy.

The stack itself starts in `bash deploy/smoke.sh` (run by .ci/run where dockerd can start), not here:
these checks are the parts that need no Docker engine.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", ROOT / "docker-compose.yml", ROOT / "deploy" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]


def curl_commands(text: str) -> list[str]:
    """Every curl command line in a text, continuation lines joined and comment markers dropped."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [m.group(0) for m in re.finditer(r"\bcurl\b[^\n]*", joined)]


def test_every_curl_that_posts_json_says_so():
    # Without the header the server answers 400: the examples must work when pasted.
    posting = []
    for path in DOC_FILES:
        for command in curl_commands(path.read_text(encoding="utf-8")):
            if re.search(r"\s(-d|--data\S*)\s", command):
                posting.append((path.name, command))
                assert re.search(r"-H\s+['\"]Content-Type: application/json['\"]", command), (path.name, command)
    assert len(posting) >= 3, posting  # the compose comment, deploy/README.md, docs/serve.md


def test_the_curl_finder_sees_a_missing_header():
    text = "# curl -H 'Authorization: Bearer k' \\\n#   http://h/search -d '{}'\n"
    [command] = curl_commands(text)
    assert "-d '{}'" in command and "Content-Type" not in command
    assert shlex.split(command)[0] == "curl"


def test_bash_parses_the_shell_scripts():
    bash = shutil.which("bash")
    assert bash is not None
    scripts = [ROOT / ".ci" / "run"]
    for script in scripts:
        done = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, (script, done.stderr)

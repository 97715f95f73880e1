"""The files of the real compose start (deploy/smoke.sh, deploy/smoke/) and the commands users copy.

The stack itself starts in `bash deploy/smoke.sh` (run by .ci/run where dockerd can start), not here:
these checks are the parts that need no Docker engine.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from support import waiting
from support.serve_server import free_port

from ragvps.embed.models import model_spec
from ragvps.embed.ollama import OllamaEmbedder
from ragvps.errors import InputTooLongError, MissingModelError

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "deploy" / "smoke.sh"
STAND_INS = ROOT / "deploy" / "smoke"
OLLAMA = STAND_INS / "ollama" / "ollama"
DOC_FILES = [
    ROOT / "README.md",
    ROOT / "docker-compose.yml",
    ROOT / "deploy" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


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
    for script in (
        SMOKE,
        STAND_INS / "postgres" / "docker-entrypoint.sh",
        STAND_INS / "systemd" / "check.sh",
        STAND_INS / "replica.sh",
        ROOT / "deploy" / "postgres" / "standby.sh",
        ROOT / ".ci" / "run",
    ):
        done = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, (script, done.stderr)


# --- the stand-in images ----------------------------------------------------------------------------------


def from_images(dockerfile: Path) -> list[str]:
    return [line.split()[1] for line in dockerfile.read_text().splitlines() if line.upper().startswith("FROM ")]


def test_each_stand_in_starts_from_an_image_the_script_makes():
    script = SMOKE.read_text()
    made = set(re.findall(r"-t (ragvps-smoke/[\w.:-]+)", script))
    made |= {f"ragvps-smoke/debian:{suite}-minbase" for suite in re.findall(r" base_image (\w+)\n", script)}
    made.add(compose_service("ragvps")["image"])  # type: ignore[arg-type]  # built by `docker compose build`
    put_in_by_the_script = {"ca-certificates", "docker", "docker-compose"}
    dockerfiles = sorted(STAND_INS.glob("*/Dockerfile"))
    assert [d.parent.name for d in dockerfiles] == ["ollama", "postgres", "python", "systemd"]
    for dockerfile in dockerfiles:
        assert from_images(dockerfile), dockerfile
        assert set(from_images(dockerfile)) <= made, (dockerfile, from_images(dockerfile), made)
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY "):
                source = line.split()[1].rstrip("/")
                assert source in put_in_by_the_script or (dockerfile.parent / source).exists(), (dockerfile, line)


def test_no_stand_in_turns_tls_checks_off():
    for path in [SMOKE, *STAND_INS.rglob("*")]:
        if path.is_file():
            text = path.read_text()
            for switch in ("--trusted-host", "verify=False", "--insecure", "PYTHONHTTPSVERIFY", "-k "):
                assert switch not in text, (path, switch)


# --- the Ollama stand-in, run as a real process -------------------------------------------------------------


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[dict[str, str]]:
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "OLLAMA_HOST": f"0.0.0.0:{port}",
        "OLLAMA_MODELS": str(tmp_path / "models"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.Popen([sys.executable, str(OLLAMA), "serve"], env=env, stderr=subprocess.DEVNULL)
    deadline = waiting.deadline(20)
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/").text == "Ollama is running":
                break
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.1)
    yield env | {"URL": f"http://127.0.0.1:{port}"}
    proc.terminate()
    proc.wait(10)


def ollama(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(OLLAMA), *args], env=env, capture_output=True, text=True, timeout=30)


def compose_service(name: str) -> dict[str, object]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]  # type: ignore[no-any-return]


def test_the_compose_healthcheck_and_pull_job_run_against_the_stand_in(stand_in: dict[str, str], tmp_path: Path):
    model = "nomic-embed-text:v1.5"
    health = compose_service("ollama")["healthcheck"]["test"]  # type: ignore[index]
    assert health == ["CMD", "ollama", "list"]
    assert ollama(stand_in, "list").returncode == 0
    missing = ollama(stand_in, "show", model)
    assert missing.returncode == 1 and "not found" in missing.stderr
    # The pull job's own command line, with the stand-in as `ollama`.
    pull = compose_service("ollama-pull")
    script = pull["command"][0].replace("$$", "$")  # type: ignore[index]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ollama").write_text(f'#!/bin/sh\nexec {sys.executable} {OLLAMA} "$@"\n')
    (bindir / "ollama").chmod(0o755)
    env = stand_in | {"PATH": f"{bindir}:/usr/bin:/bin", "OLLAMA_HOST": stand_in["URL"], "RAGVPS_EMBED_MODEL": model}
    first = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0 and "success" in first.stdout, first
    again = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "success" not in again.stdout  # present now: nothing pulled
    assert model in ollama(stand_in, "list").stdout
    assert ollama(stand_in, "pull", "no-such-model").returncode == 1


def test_ragvps_embeds_through_the_stand_in(stand_in: dict[str, str]):
    spec = model_spec("nomic-embed-text:v1.5")
    assert spec is not None
    client = OllamaEmbedder(stand_in["URL"], spec, retries=0)
    with pytest.raises(MissingModelError, match="ollama pull"):
        client.show()
    assert ollama(stand_in, "pull", spec.name).returncode == 0
    info = client.show()
    assert (info.architecture, info.dims, info.context_length) == ("nomic-bert", 768, 2048)
    vectors = client.embed(
        [
            "search_document: ingest twice re-embeds nothing",
            "search_query: ingest twice",
            "search_query: PostgreSQL restart",
        ]
    )
    assert vectors.shape == (3, 768)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]  # shared words are near
    with pytest.raises(InputTooLongError):
        client.embed(["word " * 3000])


def test_the_healthcheck_fails_when_the_stand_in_is_down():
    env = {"PATH": "/usr/bin:/bin", "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}
    done = ollama(env, "list")
    assert done.returncode == 1 and "could not connect" in done.stderr


# --- deploy/README.md's steps are the smoke test's ---------------------------------------------------------


def readme_commands(*sections: str) -> list[str]:
    """The shell lines of the README's ```sh blocks in the given sections, `sudo -u ragvps` and comments dropped."""
    text = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    commands = []
    for part in re.split(r"^### ", text, flags=re.M):
        if not part.startswith(sections):
            continue
        for block in re.findall(r"```sh\n(.*?)```", part, flags=re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = re.sub(r"\s+#\s.*$", "", line.strip())
                line = re.sub(r"^sudo (-u ragvps )?", "", line)
                if line:
                    commands.append(" ".join(line.split()))
    return commands


def test_every_compose_and_systemctl_step_a_vps_user_copies_is_run_by_the_smoke_test():
    smoke = " ".join((SMOKE.read_text() + (STAND_INS / "systemd" / "check.sh").read_text()).split())
    commands = readme_commands("Set up", "The server", "Nightly reindex")
    steps = [c for c in commands if c.startswith(("docker compose", "systemctl", "curl"))]
    assert len(steps) >= 10, steps
    for command in steps:
        if command.startswith("curl"):  # the smoke test's curl adds -f and its own key variable
            path = re.search(r"127\.0\.0\.1:8765(/\w+)", command)
            assert path and f"$url{path.group(1)}" in smoke or f"8765{path.group(1)}" in smoke, command
        elif command.startswith("systemctl"):
            verb = re.sub(r" +&&.*", "", command.replace("sudo ", ""))
            assert verb in smoke, command
        else:
            assert command in smoke, command

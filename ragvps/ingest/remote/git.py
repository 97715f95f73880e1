"""A git repository as a source: a URL or a path, a branch, include and exclude globs. The git CLI keeps a bare
copy beside the mirror (`KB_DIR/sources/<name>.git`); a sync fetches the branch, lists the commit's files with
their blob ids (`git ls-tree`), and reads only the blobs whose id changed (`git cat-file --batch`), so a commit
that changes one file reads one file. Files are read from git's objects, never from a checkout: a symlink is
a blob holding its target's name and is never followed (a link out of the repository reads nothing), and a
submodule is not entered. Each file links to `<repository>/blob/<commit>/<path>` (a web host's URL) or to
`<path>@<commit>:<path>` (a local repository), or to the source's own `link` template.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

from ragvps.db.sources import Item
from ragvps.errors import UnavailableError, UsageError
from ragvps.ingest.remote import Fetch, Fetched
from ragvps.ingest.remote.mirror import kept, remove, safe_rel
from ragvps.ingest.sources import KINDS
from ragvps.reach import Blocked

# Never a transport that runs a command (ext::) or reads another protocol than these.
_ENV = {
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "echo",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
}
WALK_PER_ITEM, MIN_WALK = 20, 100_000  # tree entries walked at most: per max_items, and at least
WALK_S = 120.0  # a tree's walk at most
_FILE, _LINK, _MODULE = ("100644", "100755"), "120000", "160000"


_PROXIES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"}


def _env() -> dict[str, str]:
    """git's environment: no proxy (a proxy would resolve the host itself), no user or system configuration (its
    credential helpers and rewrites are the server's, not the source's), no prompt, no command transports."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXIES and not k.startswith("GIT_")}
    return {**env, **_ENV}


def _git(
    fetch: Fetch, *args: str, repo: Path | None = None, data: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    cmd = ["git", *(["--git-dir", str(repo)] if repo else []), *args]
    try:
        done = subprocess.run(
            cmd,
            input=data,
            capture_output=True,
            timeout=max(fetch.timeout * 20, 60),
            env=_env() | (env or {}),
            check=False,
        )
    except FileNotFoundError as exc:
        raise UnavailableError("a git source needs the git command: install git (`apt-get install git`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise UnavailableError(f"source {fetch.name}: `git {args[0]}` took too long; sync again later") from exc
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UnavailableError(f"source {fetch.name}: `git {args[0]}` failed: {(said or ['?'])[-1][:300]}")
    return done.stdout


def _location(location: str) -> str:
    """A path as git's file URL (an absolute path); a URL as it is."""
    if "://" in location or _SCP.match(location):
        return location
    path = Path(location).expanduser().resolve()
    if not path.exists():
        raise UsageError(f"git source {location}: no such repository folder; give a URL or an existing path")
    return str(path)


_SCP = re.compile(r"^[^/:@]+@([^/:]+):")  # git@host:path


def _pinned(fetch: Fetch) -> list[str]:
    """git's options that hold it to the address the reach rule allows: over http(s), curl connects to that very
    address (resolved here once) and follows no redirect; over ssh and git, the host's address is checked first."""
    location = fetch.location
    scp = _SCP.match(location)
    parts = urlsplit(location)
    if not scp and parts.scheme not in ("http", "https", "ssh", "git"):
        return []  # a path on the server: only `ragvps source add` on the server adds one
    host = scp.group(1) if scp else parts.hostname or ""
    try:
        port = 22 if scp else parts.port or {"http": 80, "https": 443, "ssh": 22, "git": 9418}[parts.scheme]
        address = fetch.reach.address(host, port)
    except (Blocked, ValueError) as exc:
        raise UnavailableError(f"git source {fetch.name}: {exc}") from None
    if scp or parts.scheme not in ("http", "https"):
        return []
    pin = f"[{address}]" if ":" in address else address
    return ["-c", f"http.curloptResolve={host}:{port}:{pin}", "-c", "http.followRedirects=false", "-c", "http.proxy="]


# ssh with none of the server's keys, agent or configuration: a source's ssh needs source_ambient_credentials
NO_SSH_KEYS = (
    "ssh -F /dev/null -o IdentitiesOnly=yes -o IdentityFile=/dev/null -o IdentityAgent=none -o BatchMode=yes "
    "-o StrictHostKeyChecking=yes"
)


def _credential(fetch: Fetch) -> dict[str, str]:
    """The source's own credential for git over http(s), as a header in git's environment (never on its command
    line, never in the URL git might print); it goes only to the pinned host, which redirects nowhere. Over ssh,
    the server's keys only where source_ambient_credentials names the source."""
    scheme = "ssh" if _SCP.match(fetch.location) else urlsplit(fetch.location).scheme
    if scheme == "ssh" and not fetch.ambient:
        return {"GIT_SSH_COMMAND": NO_SSH_KEYS, "SSH_AUTH_SOCK": ""}
    if not fetch.secret or scheme not in ("http", "https"):
        return {}
    basic = base64.b64encode(fetch.secret.encode()).decode("ascii")
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


def link(fetch: Fetch, commit: str, path: str) -> str:
    template = fetch.text("link")
    if template:
        try:
            return template.format(commit=commit, path=quote(path))
        except (KeyError, IndexError, ValueError, AttributeError):  # a template added before it was checked
            pass
    location = fetch.location
    if location.startswith(("http://", "https://")):
        return f"{location.removesuffix('/').removesuffix('.git')}/blob/{commit}/{quote(path)}"
    return f"{location}@{commit}:{path}"


def fetch(fetch: Fetch) -> Fetched:
    """Sync a git branch into the mirror, reading only the blobs that changed since the last sync."""
    branch = fetch.text("branch") or "main"
    repo = fetch.mirror.with_name(fetch.mirror.name + ".git")
    if not (repo / "HEAD").exists():
        _git(fetch, "init", "--bare", "--quiet", str(repo))
    _git(
        fetch,
        *_pinned(fetch),
        "fetch",
        "--quiet",
        "--no-tags",
        "--prune",
        _location(fetch.location),
        f"+refs/heads/{branch}:refs/heads/{branch}",
        repo=repo,
        env=_credential(fetch),
    )
    commit = _git(fetch, "rev-parse", f"refs/heads/{branch}^{{commit}}", repo=repo).decode().strip()
    out = Fetched(cursor=commit)
    if commit == fetch.cursor and all((fetch.mirror / i.rel).exists() for i in fetch.known.values()):
        out.items, out.unchanged = dict(fetch.known), len(fetch.known)
        return out
    wanted = _listed(fetch, repo, commit, out)
    changed = {path: blob for path, (blob, _) in wanted.items() if _changed(fetch, path, blob)}
    for path in wanted:
        if path not in changed:
            out.items[path] = fetch.known[path]
            out.unchanged += 1
    for n, (path, data) in enumerate(_blobs(fetch, repo, changed), start=1):
        rel = safe_rel(path)
        assert rel is not None  # _listed kept only safe paths
        fetch.progress("fetch", n, len(changed))
        if not kept(fetch, out, path, rel, data):
            continue
        out.items[path] = Item(rel, link(fetch, commit, path), changed[path])
        out.read += 1
    for path, old in fetch.known.items():
        if path not in out.items:
            remove(fetch.mirror, old.rel)
            out.deleted += 1
    return out


def _changed(fetch: Fetch, path: str, blob: str) -> bool:
    old = fetch.known.get(path)
    return old is None or old.version != blob or not (fetch.mirror / old.rel).exists()


def _listed(fetch: Fetch, repo: Path, commit: str, out: Fetched) -> dict[str, tuple[str, int]]:
    """The commit's files this source reads: path -> (blob id, size); the rest counted by why they are not read."""
    include, exclude = fetch.strings("include") or ["*"], fetch.strings("exclude")
    wanted: dict[str, tuple[str, int]] = {}
    for entry in _walk(fetch, repo, commit, out):
        head, _, raw = entry.partition(b"\t")
        mode, _kind, blob, size = head.decode().split()
        path = raw.decode("utf-8", "surrogateescape")
        if not _matches(path, include) or _matches(path, exclude):
            continue
        if mode in (_LINK, _MODULE):
            what = "symlink, not followed" if mode == _LINK else "submodule, not entered"
            out.skip(what, f"{fetch.name}: {path}: a {what}", fetch.warn, path)
        elif mode not in _FILE or Path(path).suffix.lower() not in KINDS or safe_rel(path) is None:
            out.skipped["unsupported type"] += 1
        elif int(size) > fetch.max_item_bytes:
            out.skip(
                "too large",
                f"{fetch.name}: {path}: {int(size):,} bytes, more than max_item_bytes "
                f"({fetch.max_item_bytes:,}), skipped",
                fetch.warn,
                path,
            )
        elif len(wanted) >= fetch.max_items:
            out.skip(
                "over max_items",
                f"{fetch.name}: more than {fetch.max_items:,} files; {path} and the rest "
                "skipped (raise the source's max_items)",
                fetch.warn,
            )
            break  # the walk stops here: a tree of a million paths costs what its first max_items do
        else:
            wanted[path] = (blob, int(size))
    return wanted


def _walk(fetch: Fetch, repo: Path, commit: str, out: Fetched) -> Iterator[bytes]:
    """The commit's tree entries as `git ls-tree` streams them, the walk bounded: at most WALK_PER_ITEM x max_items
    entries (at least MIN_WALK) and WALK_S seconds, then stopped (a tree bomb of a million paths in seven objects
    is cut there), with a cancel checked as it goes."""
    bound, deadline = max(MIN_WALK, WALK_PER_ITEM * fetch.max_items), time.monotonic() + WALK_S
    cmd = ["git", "--git-dir", str(repo), "ls-tree", "-r", "-l", "-z", "--full-tree", commit]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())
    assert proc.stdout is not None
    pending, count = b"", 0
    try:
        while block := os.read(proc.stdout.fileno(), 1 << 16):
            *entries, pending = (pending + block).split(b"\0")
            fetch.tick()
            for entry in entries:
                count += 1
                if count > bound or time.monotonic() > deadline:
                    what = f"{bound:,} entries" if count > bound else f"{WALK_S:.0f} s"
                    message = f"{fetch.name}: the tree's walk stopped after {what}; the rest not read"
                    out.skip("tree too large", message, fetch.warn)
                    return
                yield entry
    finally:
        proc.kill()
        proc.wait()


def _matches(path: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def _blobs(fetch: Fetch, repo: Path, blobs: dict[str, str]) -> Iterator[tuple[str, bytes]]:
    """(path, content) of each blob, read by one `git cat-file --batch` process."""
    if not blobs:
        return
    paths = list(blobs)
    proc = subprocess.Popen(
        ["git", "--git-dir", str(repo), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for path in paths:
            proc.stdin.write(f"{blobs[path]}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] != b"blob":
                raise UnavailableError(f"source {fetch.name}: git has no blob for {path}")
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after each object
            yield path, data
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)

"""A git repository as a connected source (issue 46): synced from a path and over HTTP (git's dumb protocol,
served in the test), only changed files read on the next commit, deletions followed, citations linking to the
file at its commit, and a symlink out of the repository never followed."""

from __future__ import annotations

import json
import shutil
import subprocess

from support.sites import commit_all, git, new_repo, served

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
B = "# Lighthouse\n\nThe lighthouse keeper logs forty ships each week in the harbour book.\n"


def _sync(cli, *names: str, expect: int = 0) -> list[dict]:
    return json.loads(cli("sync", *names, "--json", expect=expect).stdout)


def test_git_path_incremental_deletions_and_links(cli, tmp_path):
    repo = tmp_path / "handbook"
    first = new_repo(
        repo,
        {
            "docs/ferries.md": A,
            "docs/lighthouse.md": B,
            "logo.bin": "x",
            "notes/skip.md": "# Skipped\n\nexcluded by a glob.\n",
        },
    )
    (tmp_path / "secret.md").write_text("# Secret\n\nThe vault code is 8841.\n")
    (repo / "docs" / "escape.md").symlink_to(tmp_path / "secret.md")
    first = commit_all(repo, "a link out")
    cli("source", "add", "git", "handbook", str(repo), "--exclude", "notes/*")
    [report] = _sync(cli)
    assert report["state"] == "partial" and report["read"] == 2 and report["items"] == 2, report
    assert report["skipped"] == {"symlink, not followed": 1, "unsupported type": 1}
    assert "docs/escape.md: a symlink, not followed" in report["problems"][0]
    hits = json.loads(cli("query", "night ferry Brindle Island", "--json").stdout)
    assert hits[0]["path"] == f"{repo}@{first}:docs/ferries.md", hits[0]
    assert not json.loads(cli("query", "vault code", "--json", "--mode", "keyword").stdout)

    again = _sync(cli, "handbook")[0]
    assert again["read"] == 0 and again["unchanged"] == 2 and not again["ingested"], again

    (repo / "docs" / "lighthouse.md").write_text(B.replace("forty", "fifty"))
    (repo / "docs" / "ferries.md").unlink()
    second = commit_all(repo)
    changed = _sync(cli)[0]
    assert (changed["read"], changed["unchanged"], changed["deleted"]) == (1, 0, 1), changed
    assert changed["documents_stored"] == 1 and changed["documents_deleted"] == 1
    assert not json.loads(cli("query", "night ferry Brindle", "--json", "--mode", "keyword").stdout)
    hits = json.loads(cli("query", "lighthouse keeper ships", "--json").stdout)
    assert hits[0]["path"] == f"{repo}@{second}:docs/lighthouse.md"

    listed = json.loads(cli("source", "list", "--json").stdout)
    assert listed[0]["name"] == "handbook" and listed[0]["cursor"] == second and listed[0]["items"] == 1
    out = cli("source", "remove", "handbook").stdout
    assert "its 1 document" in out
    assert not json.loads(cli("query", "lighthouse keeper", "--json", "--mode", "keyword").stdout)


def test_git_over_http_links_to_the_file_at_its_commit(cli, tmp_path):
    work = tmp_path / "work"
    commit = new_repo(work, {"guide.md": A})
    site = tmp_path / "site"
    site.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(site / "handbook.git")], check=True)
    git(site / "handbook.git", "update-server-info")
    cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.1"  # the server's configuration lets sources reach loopback
    with served(site) as base:
        cli("source", "add", "git", "web-handbook", f"{base}/handbook.git")
        [report] = _sync(cli)
        assert report["state"] == "ok" and report["read"] == 1, report
        hits = json.loads(cli("query", "night ferry", "--json").stdout)
        assert hits[0]["path"] == f"{base}/handbook/blob/{commit}/guide.md"


def test_a_failed_sync_is_named_and_kept(cli, tmp_path):
    repo = tmp_path / "gone"
    new_repo(repo, {"a.md": A})
    cli("source", "add", "git", "gone", str(repo), "--branch", "nope")
    result = cli("sync", expect=1)
    assert "gone: failed" in result.stdout and "nope" in result.stdout
    assert json.loads(cli("source", "list", "--json").stdout)[0]["state"] == "failed"
    shutil.rmtree(repo)


def test_bad_sources_are_refused(cli, tmp_path):
    assert "not an http(s) URL" in cli("source", "add", "web", "w", "ftp://x", expect=2).stderr
    assert "not a bucket name" in cli("source", "add", "s3", "b", "../x", expect=2).stderr
    assert "do not apply" in cli("source", "add", "web", "w", "http://x/", "--branch", "b", expect=2).stderr
    new_repo(tmp_path / "r", {"a.md": A})
    cli("source", "add", "git", "r", str(tmp_path / "r"))
    assert "exists" in cli("source", "add", "git", "r", str(tmp_path / "r"), expect=1).stderr


def _tree_bomb(repo, levels: int = 6) -> None:
    """A commit of 10**levels paths made of levels + 1 objects: each tree names the one below ten times."""
    new_repo(repo, {"seed.md": A})
    blob = git(repo, "hash-object", "-w", "seed.md")
    entries = "".join(f"100644 blob {blob}\tf{n}.md\n" for n in range(10))
    for _ in range(levels - 1):
        tree = subprocess.run(
            ["git", "-C", str(repo), "mktree"], input=entries, capture_output=True, text=True, check=True
        ).stdout.strip()
        entries = "".join(f"040000 tree {tree}\td{n}\n" for n in range(10))
    top = subprocess.run(
        ["git", "-C", str(repo), "mktree"], input=entries, capture_output=True, text=True, check=True
    ).stdout.strip()
    commit = git(repo, "commit-tree", top, "-p", "HEAD", "-m", "bomb")
    git(repo, "update-ref", "refs/heads/main", commit)


def test_a_tree_bomb_is_walked_only_to_its_bound(cli, tmp_path):
    _tree_bomb(tmp_path / "bomb")
    cli("source", "add", "git", "bomb", str(tmp_path / "bomb"), "--max-items", "10")
    done = cli("sync", "bomb", "--json")
    [report] = json.loads(done.stdout)
    assert report["read"] == 10 and report["skipped"]["over max_items"] == 1, report
    assert done.stderr.count("more than 10 files") <= 1, done.stderr[-500:]
    cli("source", "add", "git", "none", str(tmp_path / "bomb"), "--max-items", "10", "--include", "*.txt")
    [report] = json.loads(cli("sync", "none", "--json").stdout)
    assert report["skipped"]["tree too large"] == 1 and report["read"] == 0, report
    assert "the tree's walk stopped after 100,000 entries" in report["problems"][0]

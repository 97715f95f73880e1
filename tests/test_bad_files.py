"""One bad file never blocks the others: each is skipped with one warning naming it and why (or read
honestly), counted in the summary, and every good file beside it is stored."""

from __future__ import annotations

import codecs
import gzip
import json
import os
import random

import psycopg


def _bad_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nThe lighthouse keeper rotates the lamp every night.\n")
    (folder / "plain.txt").write_text("Plain text about the harbour crane.\n")
    rng = random.Random(1)
    (folder / "binary.md").write_bytes(bytes(rng.randrange(256) for _ in range(4000)) + b"\x00")
    (folder / "archive.txt").write_bytes(gzip.compress(b"compressed words " * 100))
    sixteen = "# Sixteen\n\nwritten in utf sixteen\n".encode("utf-16-le")
    (folder / "sixteen.md").write_bytes(codecs.BOM_UTF16_LE + sixteen)
    (folder / "bom8.txt").write_bytes(codecs.BOM_UTF8 + b"an eight bit mark")
    (folder / "stray.md").write_text("# Stray\n\n" + "x" * 9000 + " before\x00after the nul\n")
    (folder / "title.md").write_text("# Ti\x00tle\n\na stray NUL near the top is no binary file\n")
    os.close(os.open(os.fsencode(folder) + b"/caf\xe9.md", os.O_CREAT | os.O_WRONLY))
    with open(os.fsencode(folder) + b"/caf\xe9.md", "w") as f:
        f.write("# Cafe\n\nLatin-1 named file about espresso.\n")
    (folder / "blank.md").write_text("  \n\n\t \n")
    (folder / "script.html").write_text(
        "<html><head><script>var x = 1;</script></head><body><script>alert(1)</script><style>p {}</style></body></html>"
    )
    (folder / "records.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"_id": "r1", "title": "One", "text": "the first record"}),
                json.dumps({"_id": "r2", "title": "Null", "text": None}),
                json.dumps({"_id": "r3", "title": "Ze\u0000ro", "text": "a zero \u0000 byte", "x": 1}),
                json.dumps({"_id": "r4", "text": "   "}),
            ]
        )
        + "\n"
    )
    (folder / "nothing.jsonl").write_text(json.dumps({"_id": "n", "text": None}) + "\n")
    return folder


def test_bad_files_beside_good_ones(cli, tmp_path, db_url):
    folder = _bad_folder(tmp_path)
    result = cli("ingest", str(folder), "--json")
    report = json.loads(result.stdout)
    err = " ".join(result.stderr.split())
    assert "Traceback" not in err and "unexpected error" not in err
    # Records a JSON Lines file could not use are counted too (r2, r4 and nothing.jsonl's one).
    assert report["skipped"] == {"binary": 2, "no text": 2, "no documents": 1, "JSON Lines records": 3}
    assert "binary.md: binary content (a NUL byte at offset" in err
    assert "archive.txt: gzip-compressed data, not text; skipped" in err
    assert "blank.md: only whitespace" in err and "script.html: no text once markup" in err
    assert "records.jsonl:2: `text` is null, not a string, skipped" in err
    assert "records.jsonl:4: _id 'r4' has no text" in err
    assert "nothing.jsonl: no JSON Lines record with text, skipped" in err
    assert "caf\\xe9.md: the file name is not valid UTF-8" in err
    assert "stray.md: 1 NUL characters removed" in err and "title.md: 1 NUL characters removed" in err
    with psycopg.connect(db_url) as conn:
        docs = dict(conn.execute("SELECT doc_id, title FROM documents").fetchall())
        texts = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT d.doc_id, string_agg(c.text, ' ') FROM chunks c JOIN documents d ON d.id = c.document_id "
                "GROUP BY d.doc_id"
            )
        }
    assert sorted(docs) == [
        "bom8.txt",
        "caf\\xe9.md",
        "good.md",
        "plain.txt",
        "r1",
        "r3",
        "sixteen.md",
        "stray.md",
        "title.md",
    ]
    assert docs["title.md"] == "Title"
    assert docs["sixteen.md"] == "Sixteen" and "written in utf sixteen" in texts["sixteen.md"]
    assert texts["bom8.txt"] == "an eight bit mark"
    assert docs["r3"] == "Zero" and texts["r3"] == "a zero  byte"
    assert "beforeafter the nul" in texts["stray.md"]
    assert report["documents"] == 9
    again = json.loads(cli("ingest", str(folder), "--json").stdout)
    assert again["unchanged"] == 9 and again["stored"] == 0 and again["deleted"] == 0


def test_nul_artifact_from_an_older_run_is_chunked_again(cli, tmp_path, db_url):
    """A chunk file written before NULs were removed (the old UTF-16 path) is not reused."""
    from ragvps.ingest.artifacts import ChunkArtifacts

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nsome text\n")
    cli("chunk", str(folder))
    artifacts = ChunkArtifacts(tmp_path / "data" / "kb" / "default", folder.resolve())
    path = artifacts.path("a.md")
    lines = path.read_text().splitlines()
    lines[-1] = lines[-1].replace("some text", "some\\u0000text")
    path.write_text("\n".join(lines) + "\n")
    report = json.loads(cli("ingest", str(folder), "--json").stdout)
    assert report["rechunked_files"] == 1 and report["stored"] == 1


def test_only_bad_files(cli, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "blob.md").write_bytes(b"\x00\x01\x02" * 100)
    result = cli("ingest", str(folder), "--json", expect=None)
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "unexpected error" not in out
    assert "blob.md: binary content" in " ".join(result.stderr.split())


def test_folder_name_not_utf8(cli, tmp_path):
    folder = os.fsencode(tmp_path) + b"/d\xe9j\xe0"
    os.mkdir(folder)
    with open(folder + b"/a.md", "w") as f:
        f.write("# A\n\ntext\n")
    result = cli("ingest", os.fsdecode(folder), expect=2)
    assert "is not valid UTF-8: rename it" in result.stderr and "d\\xe9j\\xe0" in result.stderr

"""The bundle file alone (ragvps/db/bundle_file.py), no database: a tar streamed member by member that tar reads,
and every way a file can be wrong found before a caller writes anything."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

from ragvps.db.bundle_file import BundleWriter, lines, open_bundle, safe_name
from ragvps.errors import BadBundleError


def _bundle(path, members: dict[str, bytes], **manifest) -> None:
    writer = BundleWriter(path)
    for name, data in members.items():
        with writer.member(name) as sink:
            for i in range(0, len(data), 1000):  # written in pieces, as an export streams
                sink.write(data[i : i + 1000])
    writer.finish(
        {
            "format": "ragvps-bundle",
            "version": 1,
            "kb": {"name": "b", "settings": {}},
            "counts": {"documents": 0, "chunks": 0},
            "tables": {},
            "vector_sets": [],
        }
        | manifest
    )


def test_a_streamed_bundle_is_a_plain_tar_with_checksums(tmp_path):
    rows = b"".join(json.dumps({"id": i, "text": "x" * (i % 700)}).encode() + b"\n" for i in range(3000))
    _bundle(tmp_path / "b.ragvps", {"chunks.jsonl": rows, "vectors/1.f32": bytes(range(256)) * 5})
    assert not (tmp_path / "b.ragvps.part").exists()
    with tarfile.open(tmp_path / "b.ragvps") as tar:  # any tar reader reads it
        assert tar.getnames() == ["chunks.jsonl", "vectors/1.f32", "manifest.json"]
        manifest = json.load(tar.extractfile("manifest.json"))
        assert tar.extractfile("chunks.jsonl").read() == rows
    assert manifest["members"]["chunks.jsonl"] == {"size": len(rows), "sha256": hashlib.sha256(rows).hexdigest()}
    bundle = open_bundle(tmp_path / "b.ragvps")
    try:
        batches = list(lines(bundle.open("chunks.jsonl"), batch_bytes=50_000))
        assert len(batches) > 1 and sum(len(b) for b in batches) == 3000
        assert json.loads(batches[-1][-1]) == {"id": 2999, "text": "x" * (2999 % 700)}
    finally:
        bundle.close()


@pytest.mark.parametrize(
    "name, safe",
    [
        ("chunks.jsonl", True),
        ("vectors/1.f32", True),
        ("../../etc/x", False),
        ("/etc/passwd", False),
        ("a/../b", False),
        ("a\\b", False),
        ("c:x", False),
        ("./a", False),
        ("", False),
    ],
)
def test_member_names_stay_inside(name, safe):
    assert safe_name(name) is safe


def test_every_cut_of_a_bundle_is_refused(tmp_path):
    _bundle(tmp_path / "b.ragvps", {"documents.jsonl": b'{"id": 1}\n' * 500, "chunks.jsonl": b'{"id": 2}\n' * 900})
    raw = (tmp_path / "b.ragvps").read_bytes()
    for cut in range(0, len(raw) - 1024, 509):  # the last two blocks are the tar's end marker: cut before them
        (tmp_path / "cut.ragvps").write_bytes(raw[:cut])
        with pytest.raises(BadBundleError) as info:
            open_bundle(tmp_path / "cut.ragvps").close()
        assert info.value.kind == "corrupt" and "nothing was written" in str(info.value), cut


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("kb", {"settings": {}}, "names no knowledge base"),
        ("counts", {"documents": 1}, "does not count its documents and chunks"),
        ("counts", {"documents": -1, "chunks": 0}, "does not count its documents and chunks"),
        ("tables", {"chunks": 7}, "lists its tables without their members"),
        ("vector_sets", [{"id": 1, "dims": 0, "vector_type": "vector"}], "a vector set in the manifest is incomplete"),
        ("vector_sets", {"id": 1}, "vector_sets is not a list"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused_by_name_before_anything_is_read(tmp_path, field, value, said):
    _bundle(tmp_path / "b.ragvps", {"chunks.jsonl": b"{}\n"}, **{field: value})
    with pytest.raises(BadBundleError, match=said):
        open_bundle(tmp_path / "b.ragvps")

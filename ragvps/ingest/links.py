"""The links of a mirrored source (ragvps.ingest.remote): `.links.json` in its folder maps each file to its
item's own URL (a dot file, so a scan of the folder never reads it as a document). Any ingest of that folder (a
sync, a reindex) sets each document's source to that URL, so a citation names the web page, the file at its
commit, or the object."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ragvps.ingest.artifacts import ChunkFile

LINKS = ".links.json"


def write_links(mirror: Path, links: Mapping[str, str]) -> None:
    mirror.mkdir(parents=True, exist_ok=True)
    tmp = mirror / f"{LINKS}.part"
    tmp.write_text(json.dumps(dict(sorted(links.items())), indent=0), encoding="utf-8")
    os.replace(tmp, mirror / LINKS)


def links(root: Path) -> dict[str, str]:
    """The links of a mirror folder (file -> URL); empty for any other folder."""
    try:
        data = json.loads((root / LINKS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def linked(files: Sequence[ChunkFile], urls: Mapping[str, str]) -> list[ChunkFile]:
    """The chunk stage's files with each document's source set to its item's URL (`urls`: a mirror's links)."""
    if not urls:
        return list(files)
    return [replace(f, documents=[replace(d, source=urls.get(d.source, d.source)) for d in f.documents]) for f in files]

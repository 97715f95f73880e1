"""Text rules every stage may use: sentence spans in plain text, table rows a question names."""

from __future__ import annotations

import re


def strip_span(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


# After . ! ? … (and a closing quote or bracket): a space, or a Spanish ¿ ¡ opening the next sentence at once;
# after the CJK full stops (。！？．), which need no space.
_END = re.compile(r"[.!?…]+[\"'”’»)\]]*(?:\s+|(?=[¿¡]))|[。！？．]+[”’」』》）]*\s*")
_ABBREV = frozenset(
    re.findall(
        r"\S+",
        (
            "mr mrs ms dr prof sr jr st vs etc eg ie al fig figs eq eqs no nos vol ref refs approx ca cf inc ltd "
            "co corp dept univ gen col lt sgt jan feb mar apr jun jul aug sep sept oct nov dec resp pp ed eds "
            # Spanish, Polish, German, French and Italian ones that end a word with a full stop
            "sra srta dra lic pág págs núm arts av avda ej tel ud uds vd vds ee uu aprox "
            "np tj itd itp ul tzw nr wg zob mln mld tys godz bzw ggf vgl usw evtl mme mlle"
        ),
    )
)
_WORD_BEFORE = re.compile(r"([\w.]+)$")


def sentences(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """Sentence spans in text[a:b]: after . ! ? and their CJK forms, but not after abbreviations or
    initials, nor before a lower-case word."""
    spans = []
    start = a
    for m in _END.finditer(text, a, b):
        cut = m.end()
        if cut >= b:
            break
        mark = m.group()
        if mark[0] == "." and not mark.startswith(".."):
            before = _WORD_BEFORE.search(text, max(start, m.start() - 24), m.start())
            word = before.group(1).lower() if before else ""
            if word in _ABBREV or "." in word or (len(word) == 1 and word.isalpha()) or text[cut].islower():
                continue
        elif mark[0] in "!?…" and text[cut].islower():  # ¿ and ¡ are not lower case: "¿Vienes? ¡Sí!" is two
            continue
        spans.append(strip_span(text, start, cut))
        start = cut
    spans.append(strip_span(text, start, b))
    return [s for s in spans if s[0] < s[1]]


# --- quotable sentences in Markdown, HTML text and PDF text ------------------------------------------------

_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)[ \t]*([\w+-]*)")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_SETEXT = re.compile(r"^[ \t]{0,3}(=+|-+)[ \t]*$")
_RULE = re.compile(r"^[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE = re.compile(r"^[ \t]*\|.*\||^[ \t]*:?-{3,}:?[ \t]*\|")
_ITEM = re.compile(r"^[ \t]*(?:[-*+][ \t]+|\d{1,3}[.)][ \t]+|>[ \t]?)+")
_SHELL = frozenset({"", "bash", "sh", "shell", "console", "zsh", "powershell", "ps1", "cmd", "bat", "fish"})


def quotable(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(sentences, commands) as spans of `text`: sentences are prose only (not code fences, table rows,
    headings, rules, nor list or quote markers, which are cut from the span's start); commands are the
    bodies of shell code fences, whole."""
    prose: list[tuple[int, int]] = []
    commands: list[tuple[int, int]] = []
    para: list[int] = []  # [start, end] of the paragraph being gathered
    fence: tuple[str, str, int] | None = None  # (marker, language, body start)
    pos = 0

    def flush() -> None:
        if para:
            prose.extend(sentences(text, para[0], para[1]))
            para.clear()

    for line in text.splitlines(keepends=True):
        a, b = pos, pos + len(line.rstrip("\r\n"))
        pos += len(line)
        body = text[a:b]
        if fence is not None:
            if body.strip().startswith(fence[0]):
                if fence[1] in _SHELL and text[fence[2] : a].strip():
                    commands.append(strip_span(text, fence[2], a))
                fence = None
            continue
        m = _FENCE.match(body)
        if m:
            flush()
            fence = (m.group(1), m.group(2).lower(), pos)
            continue
        if _SETEXT.match(body) and para:  # the paragraph above was a heading
            para.clear()
            continue
        if not body.strip() or _HEADING.match(body) or _RULE.match(body) or _TABLE.match(body):
            flush()
            continue
        item = _ITEM.match(body)
        if item:
            flush()
            a += item.end()
        if para:
            para[1] = b
        else:
            para.extend((a, b))
    flush()
    if fence is not None and fence[1] in _SHELL and text[fence[2] :].strip():  # a fence the chunk cuts off
        commands.append(strip_span(text, fence[2], len(text)))
    return [s for s in prose if s[0] < s[1]], commands


MAX_INTRODUCED = 1200  # characters of a block a sentence ending in a colon brings with it, at most


def introduced(text: str, end: int) -> tuple[int, int] | None:
    """The block a sentence ending at `end` with a colon introduces: the code fence (markers included), the
    list or the table that follows it after blank lines; None when none follows or it is too long."""
    pos = end
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    if pos >= len(text) or "\n" not in text[end:pos]:
        return None  # the sentence goes on on its own line: nothing is introduced below it
    lines = text[pos:].splitlines(keepends=True)
    first = lines[0].rstrip("\r\n")
    fence = _FENCE.match(first)
    taken = 0
    if fence:
        taken = len(lines[0])
        for line in lines[1:]:
            taken += len(line)
            if line.strip().startswith(fence.group(1)):
                break
        else:
            return None  # the fence goes on past the chunk: not whole
    elif _ITEM.match(first) or _TABLE.match(first):
        rule = _ITEM if _ITEM.match(first) else _TABLE
        for line in lines:
            body = line.rstrip("\r\n")
            if not body.strip() or not (rule.match(body) or (rule is _ITEM and body[:1] in " \t")):
                break
            taken += len(line)
    else:
        return None
    a, b = strip_span(text, pos, pos + taken)
    return (a, b) if b - a <= MAX_INTRODUCED else None


_ROW = re.compile(r"^\|(.+)\|[ \t]*$", re.M)
MAX_ROW_CHARS = 1200  # a row is quoted whole or not at all: what a row says is no shorter than its cells


def named_rows(text: str, question: str, *, specific: bool = False) -> list[tuple[int, int, list[str]]]:
    """The Markdown table rows of `text` whose first cell the question names (`GET /health` in "what does GET
    /health return?"), as (start, end, cells): a table's answer is its row, which no sentence splitter finds and
    whose words are mostly the question's subject, not its verbs. Header rows, rules and rows over MAX_ROW_CHARS
    are not named; a first cell under 3 characters never is. `specific`: only a first cell no common words could be
    (written as code, or with a digit or mark in it: `GET /health`, `chunk_size`, `ragvps ingest`), not `name` or
    `API keys`."""
    asked = " ".join(question.casefold().split())
    found = []
    for m in _ROW.finditer(text):
        cells = [c.strip() for c in m.group(1).split("|")]
        key = cells[0].strip("`*_ ").casefold()
        after = text[m.end() + 1 :].partition("\n")[0]
        header = bool(after.strip()) and not set(after) - set("|:- \t")  # the row above a table's rule
        if len(cells) < 2 or len(key) < 3 or header or not set(m.group(0)) - set("|:- \t"):
            continue
        plain = not cells[0].startswith("`") and all(ch.isalpha() or ch.isspace() for ch in key)
        if len(m.group(0)) > MAX_ROW_CHARS or (specific and plain):
            continue
        if re.search(r"(?<!\w)" + re.escape(key) + r"(?!\w)", asked):
            found.append((m.start(), m.end(), cells))
    return found

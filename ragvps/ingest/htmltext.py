"""HTML to text with the stdlib parser: scripts, styles and navigation dropped, h1-h6 kept as structure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_DROP = frozenset({"script", "style", "nav", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCK = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "ul",
        "ol",
        "table",
        "thead",
        "tbody",
        "blockquote",
        "pre",
        "dl",
        "figure",
        "figcaption",
        "form",
        "hr",
        "address",
        "details",
        "summary",
        "fieldset",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "body",
        "html",
    }
)
_LINE = frozenset({"br", "li", "tr", "dt", "dd", "caption", "option"})
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "wbr"})
_SPACE = re.compile(r"\s+")


@dataclass
class Page:
    title: str
    text: str
    headings: list[list[object]] = field(default_factory=list)  # [offset, level, heading text]


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.size = 0
        self.drop = 0  # depth inside dropped elements
        self.pre = 0
        self.title: list[str] = []
        self.in_title = False
        self.heading: tuple[int, int, int] | None = None  # (offset, level, index in out) of the open heading
        self.headings: list[list[object]] = []
        self.pending = ""  # the break owed before the next text

    def _emit(self, text: str) -> None:
        if self.size and self.pending:
            self.out.append(self.pending)
            self.size += len(self.pending)
        self.pending = ""
        self.out.append(text)
        self.size += len(text)

    def _brk(self, sep: str) -> None:
        if len(sep) > len(self.pending):
            self.pending = sep

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag in _DROP:
            self.drop += tag not in _VOID
            return
        if self.drop:
            return
        if tag == "pre":
            self.pre += 1
        if tag in _BLOCK:
            self._brk("\n\n")
        elif tag in _LINE:
            self._brk("\n")
        elif tag in ("td", "th") and self.out and not self.pending:
            self._brk(" ")
        if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._brk("\n\n")
            self.heading = (-1, int(tag[1]), 0)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _DROP:
            self.drop = max(0, self.drop - 1)
            return
        if self.drop:
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if self.heading and tag == f"h{self.heading[1]}":
            start, level, index = self.heading
            if start >= 0:
                self.headings.append([start, level, _SPACE.sub(" ", "".join(self.out[index:])).strip()])
            self.heading = None
        if tag in _BLOCK:
            self._brk("\n\n")
        elif tag in _LINE:
            self._brk("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.drop:
            return
        text = data if self.pre else _SPACE.sub(" ", data)
        if not self.pre and (not self.out or self.pending or self.out[-1].endswith((" ", "\n"))):
            text = text.lstrip()
        if not text:
            return
        if self.heading and self.heading[0] < 0:
            self._emit("")
            self.heading = (self.size, self.heading[1], len(self.out))
        self._emit(text)


def extract(html: str) -> Page:
    """The readable text of an HTML page, its <title> (else its first h1), and its headings' offsets."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.out)
    stripped = text.rstrip()
    title = _SPACE.sub(" ", "".join(parser.title)).strip()
    if not title:
        title = next((str(h[2]) for h in parser.headings if h[1] == 1), "")
    return Page(title, stripped, parser.headings)

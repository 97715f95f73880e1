"""A follow-up question made standalone, so retrieval finds what "and how do I undo that?" refers to.

With an LLM configured, one short call rewrites it (`rewrite_fit` is its prompt); without one, `rule` adds
the earlier user turns before the last one, but only when the last one leans on them
(`stands_alone` says when it does not: no pronoun or reference back, no leading "and", words of its own), so a
new topic is searched as itself. bench/chat_bench.py measures both against the last turn alone on
bench/data/followups.jsonl, and counts the answers the history changed on bench/data/unrelated_pairs.jsonl.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from ragvps import tokens
from ragvps.config import GenerateSettings
from ragvps.generate import budget
from ragvps.generate.prompt import Prompt, Turn

REWRITE_VERSION = "1"  # part of the rewrite's cache key: bump when the prompt below changes
REWRITE_TOKENS = 96  # the rewritten question's length at most
TURN_CHARS = 1200  # of each earlier turn shown to the rewriter (long answers are cut)
MAX_TURNS = 6  # earlier turns shown to the rewriter, the most recent ones
RULE_TURN_CHARS = 300  # of each earlier user turn the rule puts before the question

SYSTEM = (
    "You rewrite the last question of a conversation so that it can be understood without the conversation.\n"
    "Replace pronouns and vague references (it, that, this, they, the same) with what they refer to in the "
    "earlier turns. Keep the question's own words and language. If the question already stands alone, repeat "
    "it unchanged. Reply with the rewritten question only: one line, no quotes, no explanation."
)
LABEL = "Last question: "

# Words that say nothing about a topic: question words, pronouns, auxiliaries, the commonest verbs.
_STOP = """
a about above after again all also am an and any are as at be because been before being below between both but
by can could did do does doing done down during each else few for from further get gets got had has have having
he her here hers him his how i if in into is it its itself just let like me more most my no nor not now of off on
once only or other our ours out over own same say says she should so some such than that the their theirs them
then there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself instead really still tell way ways thing things something
use using used want need happen happens happened make makes else whether one two see mean means ok okay please
thanks thank well yes
"""
STOPWORDS = frozenset(_STOP.split())
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*[A-Za-z0-9]|[A-Za-z0-9]")


def terms(text: str) -> list[str]:
    """The words of a text that carry its topic, in order, each once (case folded)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        w = word.casefold().strip(".-/")
        if len(w) > 1 and w not in STOPWORDS and not w.isdigit():
            seen.setdefault(w, None)
    return list(seen)


# Words that point back at the conversation: pronouns and references whose meaning is in an earlier turn.
_BACK = frozenset(
    {
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "this",
        "that",
        "these",
        "those",
        "ones",
        "then",
        "there",
        "former",
        "latter",
        "above",
        "previous",
        "earlier",
        "again",
        "too",
        "also",
        "else",
        "instead",
        "halfway",
        "afterwards",
        "meanwhile",
    }
)
_PRONOUNS = frozenset({"it", "its", "itself", "they", "them", "their", "theirs", "themselves"})  # unless a name came
# A question opening with these goes on from the last turn ("And if it is cut short?", "What about Word files?").
_GOES_ON = re.compile(
    r"^\W*(?:and|but|or|so|also|then|what\s+about|how\s+about|why\s+not|what\s+if|"
    r"what\s+else|anything\s+else|which\s+one|same\s+for|ok|okay)\b",
    re.I,
)
# words of _BACK that refer to nothing said before: "is there a way", "a file that cannot be read", "so that"
_NOT_BACK = re.compile(
    r"\b(?:is|are|was|were|be)\s+there\b|\b(?:so|such|now|given)\s+that\b|"
    r"\b(?!(?:is|are|was|were|does|do|did)\b)[a-z]+\s+that\s+(?:can|cannot|can't|could|will|would|"
    r"should|may|might|must|is|are|was|were|has|have|had|does|do|did|doesn't|don't|isn't|aren't|"
    r"[a-z]+s)\b",
    re.I,
)
# "one" as a pronoun ("for one that died", "which one?"), not a number or "one ingest"
_ONE = re.compile(
    r"\bone\s+(?:that|which|who|of)\b|\bone\s*(?:[?.!,]|$)|"
    r"\b(?:each|which|this|that|other|another)\s+ones?\b|\bsame\s*(?:[?.!,]|$|for\b|as\b)",
    re.I,
)
_NAME = re.compile(r"\bragvps\b|(?<=\w )[A-Z][a-z][A-Za-z]*")  # a name a pronoun after it may refer to
MIN_OWN_TERMS = 2  # fewer words of its own ("Why?", "How do I see what did not fit?"): it leans on the history
SHORT_WORDS = 5  # a question this short with one word of its own names its subject ("when is payday?")
STEM_CHARS = 5  # a word's first letters, enough to tell whether the conversation touched it


def stands_alone(question: str, history: Sequence[Turn] = ()) -> bool:
    """Does the question carry its own topic? Not when it opens by going on from the last turn ("And if ...?"),
    points back with a pronoun or reference ("How do I stop it?", "Is that private?"), or has fewer than two words
    of its own, unless those words are a subject the conversation has not touched ("who is on call?" after a
    question about keys: a short question with its own subject stands alone, however short)."""
    if _GOES_ON.search(question) or _ONE.search(question) or _points_back(question):
        return False
    own = terms(question)
    if len(own) >= MIN_OWN_TERMS:
        return True
    short = len(question.split()) <= SHORT_WORDS  # "how do I see what did not fit?" says less than its length
    return short and bool(own) and bool(history) and not _touched(own, history)


def _points_back(question: str) -> bool:
    text = _NOT_BACK.sub(" ", question)
    for match in re.finditer(r"[A-Za-z]+", text):
        word = match.group().casefold()
        if word in _BACK and not (word in _PRONOUNS and _NAME.search(text, 0, match.start())):
            return True
    return False


def _stem(word: str) -> str:
    return word[:STEM_CHARS]  # "starts" and "started", "payday" and "paydays": the same subject


def _touched(own: Sequence[str], history: Sequence[Turn]) -> bool:
    """Did an earlier turn (the user's or an answer) use any of these words?"""
    said = {_stem(w) for _, text in history for w in terms(text)}
    return any(_stem(w) in said for w in own)


# A turn that closes the conversation ("thanks, that's all", "great, bye"): only such words, nothing asked.
_CLOSING_TEXT = """thanks thank thx ty you so very much a lot all that that's thats is it it's for the help helpful
    great perfect awesome nice cool ok okay alright got understood bye goodbye cheers good night day have fine no
    nothing else more done wonderful excellent appreciate appreciated i i'm im am much many"""
_CLOSING_WORDS = frozenset(_CLOSING_TEXT.split())
_CLOSING = re.compile(r"\b(?:thanks|thank|thx|ty|bye|goodbye|cheers|that'?s\s+all|appreciated?)\b", re.I)
# What Open WebUI's "Regenerate" menu sends as a user turn: the previous question, answered again.
AGAIN = frozenset({"add details", "more concise", "try again", "regenerate"})


def is_closing(question: str) -> bool:
    """Does the turn only close the conversation (thanks, bye), asking nothing?"""
    words = re.findall(r"[a-z']+", question.casefold().replace("\u2019", "'"))
    return bool(_CLOSING.search(question)) and "?" not in question and all(w in _CLOSING_WORDS for w in words)


def asks_again(question: str) -> bool:
    """Is the turn a chat client's request to answer the previous question again ("Add Details", "More Concise")?"""
    return " ".join(re.findall(r"[a-z]+", question.casefold())) in AGAIN


def previous_question(history: Sequence[Turn]) -> str:
    """The latest earlier user turn that asked something (not a closing nor another "again"), or empty."""
    for role, text in reversed(history):
        if role == "user" and text.strip() and not asks_again(text) and not is_closing(text):
            return text.strip()
    return ""


def rule(history: Sequence[Turn], question: str) -> str:
    """A question that stands alone, as it is; one that leans on the history after the earlier user turns it goes
    on from: back to the latest that stands alone, at most MAX_TURNS, each cut at RULE_TURN_CHARS."""
    if stands_alone(question, history):
        return question
    earlier: list[str] = []
    for role, text in reversed(history):
        if role != "user":
            continue
        text = " ".join(text.split())
        earlier.insert(0, text[:RULE_TURN_CHARS])
        if stands_alone(text) or len(earlier) >= MAX_TURNS:
            break
    return " ".join([*earlier, question])


def transcript(history: Sequence[Turn], question: str) -> str:
    lines = []
    for role, text in list(history)[-MAX_TURNS:]:
        text = " ".join(text.split())
        if len(text) > TURN_CHARS:
            text = text[:TURN_CHARS] + " ..."
        lines.append(f"{'User' if role == 'user' else 'Assistant'}: {text}")
    return "\n".join(lines) + f"\n\n{LABEL}{question}"


def rewrite_fit(history: Sequence[Turn], question: str, settings: GenerateSettings) -> budget.Fit:
    """The rewriting call's prompt: the system rule, then the conversation and its last question."""
    encoding, window = budget.encoding_for(settings), budget.window_for(settings)
    prompt = Prompt(SYSTEM, transcript(history, question), (), question, REWRITE_VERSION)
    n = budget.count_prompt(prompt, encoding)
    short = dataclasses.replace(settings, answer_reserve=REWRITE_TOKENS, temperature=0.0)
    return budget.Fit(
        prompt=prompt,
        prompt_tokens=n,
        system_tokens=tokens.count_llm(SYSTEM, encoding),
        window=window,
        reserve=REWRITE_TOKENS,
        encoding=encoding,
        settings=short,
    )


def clean(reply: str, question: str) -> str:
    """The rewriter's reply as one question; the original when the reply is empty or runs on."""
    text = reply.strip()
    if text.lower().startswith(LABEL.strip().lower()):
        text = text[len(LABEL.strip()) :]
    for prefix in ("standalone question:", "rewritten question:", "question:"):
        if text.lower().startswith(prefix):
            text = text[len(prefix) :]
    text = " ".join(text.strip().strip("\"\u201c\u201d'").split())
    if not re.search(r"\w", text) or len(text) > max(600, 4 * len(question)):
        return question
    return text

"""The chat use case's pure parts: reading a conversation, the source list it appends and takes off again,
the follow-up rule, the rewriter's reply, and earlier turns in the prompt and its budget."""

from __future__ import annotations

import pytest

from ragvps.app.chat import clean_turn, conversation, source_list
from ragvps.config import Settings
from ragvps.errors import InputTooLongError, UsageError
from ragvps.generate import budget, rewrite
from ragvps.generate.prompt import Source, build
from ragvps.generate.records import Citation

CITATIONS = [
    Citation(source=Source(1, "docs/serve.md#0", "docs/serve.md", "Serving > Keys", 0, 10, 1.0, "...")),
    Citation(source=Source(3, "docs/answers.md#2", "docs/answers.md", "", 0, 10, 1.0, "...")),
]


def test_the_source_list_is_markdown_with_path_and_heading():
    # one separator throughout: the path's heading path is joined with › too
    assert source_list(CITATIONS) == (
        "\n\n**Sources**\n- [1] `docs/serve.md` \u203a Serving \u203a Keys\n- [3] `docs/answers.md`"
    )
    assert source_list([]) == ""


def test_an_earlier_answer_loses_its_source_list_and_markers():
    answer = "Keys rotate nightly [1]. Old ones stay valid for a day [1, 3]." + source_list(CITATIONS)
    assert clean_turn(answer) == "Keys rotate nightly. Old ones stay valid for a day."
    assert clean_turn("No list here [2].") == "No list here."


def test_a_conversation_is_alternating_turns_and_the_last_question():
    turns, question = conversation(
        [
            ("system", "be brief"),
            ("user", "q1"),
            ("assistant", "a1 [1]"),
            ("user", "q2a"),
            ("user", "q2b"),
            ("assistant", "a2"),
            ("user", " last "),
        ]
    )
    assert turns == [("user", "q1"), ("assistant", "a1"), ("user", "q2a\n\nq2b"), ("assistant", "a2")]
    assert question == "last"
    turns, _ = conversation([("assistant", "Hello! Ask me."), ("user", "q")])
    assert turns[0][0] == "user" and turns[1] == ("assistant", "Hello! Ask me.")
    turns, _ = conversation([("user", "q1"), ("assistant", ""), ("tool", "the file's text"), ("user", "q2")])
    assert turns == [("user", "q1"), ("assistant", "the file's text")]  # a tool's result reads as conversation


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [("assistant", "a")],
        [("user", "q"), ("assistant", "a")],
        [("user", "  ")],
        [("critic", "x"), ("user", "q")],
        [("user", "q"), ("tool", "r")],
    ],
)
def test_a_conversation_without_a_last_question_is_a_usage_error(messages):
    with pytest.raises(UsageError):
        conversation(messages)


def test_the_rule_puts_the_earlier_question_before_a_follow_up():
    history = [("user", "How does the embedded PostgreSQL start?"), ("assistant", "It starts on first use.")]
    out = rewrite.rule(history, "and how do I stop it?")
    assert out == "How does the embedded PostgreSQL start? and how do I stop it?"
    assert rewrite.rule([], "what is rrf?") == "what is rrf?"
    assert rewrite.rule(history, "how does embedded postgresql start") == "how does embedded postgresql start"


def test_the_rewriters_reply_is_cleaned_or_refused():
    assert rewrite.clean('Standalone question: "How do I undo an ingest?"', "undo that?") == "How do I undo an ingest?"
    assert rewrite.clean("", "undo that?") == "undo that?"
    assert rewrite.clean("x " * 2000, "undo that?") == "undo that?"


def test_earlier_turns_go_before_the_sources_and_count_in_the_budget():
    source = Source(0, "a#0", "a.md", "A", 0, 10, 1.0, "Keys rotate nightly.")
    history = [("user", "how do keys work?"), ("assistant", "They rotate.")]
    p = build("when?", [source], history)
    assert [m["role"] for m in p.messages()] == ["user", "assistant", "user"]
    assert p.messages()[-1]["content"].startswith("Sources:")
    settings = Settings().generate
    alone = budget.fit("when?", [source], settings)
    with_history = budget.fit("when?", [source], settings, history)
    assert with_history.prompt_tokens > alone.prompt_tokens
    assert with_history.prompt.history == tuple(history)


def test_a_question_or_request_too_long_for_the_window_is_an_input_too_long_error():
    settings = Settings.of(context_window=2000, answer_reserve=200).generate
    with pytest.raises(InputTooLongError, match="raise context_window") as exc:
        budget.fit("word " * 3000, [], settings)
    assert exc.value.kind == "too_long" and exc.value.settings == ("context_window", "answer_reserve")
    with pytest.raises(InputTooLongError, match="send a shorter one"):
        budget.as_is(build("word " * 3000, []), settings)


def test_history_that_would_take_more_than_half_the_room_loses_its_oldest_turns():
    settings = Settings.of(context_window=2000, answer_reserve=200).generate
    long = "word " * 600
    history = [("user", long), ("assistant", long), ("user", "short question"), ("assistant", "short answer")]
    fit = budget.fit("when?", [], settings, history)
    assert fit.prompt.history == tuple(history[2:]) and fit.left_out == {"history": 1}

"""The server's pure parts: which addresses count as loopback, where keys come from, how they are checked."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from ragvps.app.checks import check_strings
from ragvps.config import Settings
from ragvps.errors import ConfigError, UsageError
from ragvps.serve.gate.audit_log import AuditLog
from ragvps.serve.gate.auth import check_bind, is_loopback, key_matches, load_keys, presented_key
from ragvps.serve.gate.request_log import RequestRecord
from ragvps.serve.shared.stream import done_payload, sse


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_addresses(host):
    assert is_loopback(host)
    check_bind(host, ())


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "10.0.0.1", "example.com", "localhost.evil.com"])
def test_other_addresses_need_a_key(host):
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="without an API key") as info:
        check_bind(host, ())
    assert "api_keys" in info.value.settings
    check_bind(host, ("a-key-of-sixteen-chars",))


def test_keys_from_the_setting_and_the_file(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\nfile-key-0123456789\nsetting-key-0123456789\n")
    settings = Settings.of(api_keys="setting-key-0123456789,other-key-0123456789", api_key_file=str(keys))
    assert load_keys(settings) == ("setting-key-0123456789", "other-key-0123456789", "file-key-0123456789")
    assert load_keys(Settings()) == ()


@pytest.mark.parametrize(
    "content, message", [(None, "cannot read api_key_file"), ("# only a comment\n", "no key"), ("short\n", "too short")]
)
def test_bad_key_files_and_keys_are_refused_with_what_to_do(tmp_path, content, message):
    path = tmp_path / "keys"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_keys(Settings.of(api_key_file=str(path)))
    assert "openssl rand" in str(info.value) or content is None


def test_presented_key_and_constant_time_match():
    key = "k" * 20
    assert presented_key([(b"authorization", f"Bearer {key}".encode())]) == key
    assert presented_key([(b"authorization", f"bearer   {key}  ".encode())]) == key
    assert presented_key([(b"x-api-key", key.encode())]) == key
    assert presented_key([(b"authorization", b"Basic abc")]) is None
    assert presented_key([]) is None
    assert key_matches(key, ("other-key-0123456789", key))
    assert not key_matches(key[:-1], (key,)) and not key_matches(None, (key,)) and not key_matches("", (key,))
    assert not key_matches("k\u00e9" * 10, (key,))  # non-ASCII never matches and never raises


def test_value_checks():
    assert check_strings({"a": ["x", 1.5, {"b": None}]}, "meta") == {"a": ["x", 1.5, {"b": None}]}
    with pytest.raises(UsageError, match="NUL"):
        check_strings({"a": "x\x00"}, "meta")
    with pytest.raises(UsageError, match="finite"):
        check_strings([float("inf")], "meta")
    with pytest.raises(UsageError, match="nested"):
        check_strings([[[[[[[[[[1]]]]]]]]]], "meta")


def test_server_sent_events_are_one_json_line_each():
    assert sse("token", {"text": "a\nb"}) == b'event: token\ndata: {"text": "a\\nb"}\n\n'
    from ragvps.app.requests import Answer, Retrieval
    from ragvps.generate.records import Usage

    refused = Answer(
        answer="x",
        answered=False,
        extractive=True,
        citations=(),
        invalid_citations=0,
        retrieval=Retrieval(shown=(), left_out={}, evidence=0.1, retrieved=()),
        usage=Usage(),
        cache="off",
        generator="extractive",
        model="m",
        prompt_version="1",
        timings={},
        min_evidence=0.4,
    )
    done = done_payload(refused)  # the sources went first, the text as tokens: the rest, citations always a list
    assert "sources" not in done and done["citations"] == [] and done["answer"] == "x"
    assert done["usage"] == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "cache_creation_tokens": 0,
        "counted": False,
    }


def test_every_status_the_server_sends_names_its_kind():
    from ragvps.errors import HTTP_STATUS, kind_of_status

    assert kind_of_status(401) == "unauthorized" and HTTP_STATUS["unauthorized"] == 401
    assert [kind_of_status(s) for s in (400, 404, 405, 409, 413, 415, 500, 503)] == [
        "usage",
        "not_found",
        "usage",
        "conflict",
        "too_long",
        "usage",
        "failed",
        "unavailable",
    ]


def test_the_audit_log_keeps_unwritten_rows_within_its_bound_the_oldest_dropped_first(caplog):
    ready = SimpleNamespace(library=None)  # the server still opening its library: nothing can be written yet
    audit = AuditLog(ready, with_questions=False, max_pending=3)  # type: ignore[arg-type]
    for n in range(5):
        audit.note(RequestRecord(f"r{n}", "POST", "/search", route="/search", status=200), {"state": {}})
    audit.flush()  # put back, ahead of what comes next
    audit.note(RequestRecord("r5", "POST", "/search", route="/search", status=200), {"state": {}})
    with caplog.at_level("WARNING", logger="ragvps.serve.gate.audit_log"):
        audit.flush()
    assert [e.request for e in audit._pending] == ["r3", "r4", "r5"]
    said = [int(n) for n in re.findall(r"dropped (\d+) rows", caplog.text)]
    assert sum(said) + audit._dropped == 3, caplog.text  # said at a flush, or still to be said at the next

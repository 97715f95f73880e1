"""One k limit, the setting max_k, for the CLI, HTTP and MCP; a bad --k is reported as the flag."""

import pytest

from ragvps.app.checks import check_k
from ragvps.errors import UsageError


def test_k_out_of_range_is_reported_as_the_flag(cli):
    result = cli("query", "anything", "--k", "-1", expect=2)
    assert "--k must be 1 to 100 (the setting max_k), not -1" in " ".join(result.stderr.split())
    assert "top_k" not in result.stderr


def test_the_cli_holds_the_servers_limit(cli):
    result = cli("query", "anything", "--k", "101", expect=2)
    assert "--k must be 1 to 100 (the setting max_k), not 101" in " ".join(result.stderr.split())
    cli.env["RAGVPS_MAX_K"] = "200"
    assert "max_k" not in cli("query", "anything", "--k", "101", expect=2).stderr  # past the limit: no index yet
    result = cli("ask", "anything", "--k", "0", expect=2)
    assert "--k must be 1 to 200 (the setting max_k), not 0" in " ".join(result.stderr.split())


def test_check_k():
    assert check_k(None, 10) is None and check_k(10, 10) == 10
    with pytest.raises(UsageError, match="max_k"):
        check_k(11, 10)

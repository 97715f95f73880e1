"""The installed package's version: what the HTTP API, MCP and a bundle's manifest report."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """ragvps's version as installed; "0" from a source tree that was never installed."""
    try:
        return version("ragvps")
    except PackageNotFoundError:
        return "0"

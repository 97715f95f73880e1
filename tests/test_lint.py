"""The code stays clean: ruff over the package, tests and benchmarks; mypy over the package."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.lint


def test_ruff_is_clean():
    if shutil.which("ruff") is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "ragvps", "tests", "bench"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_laid_out_by_ruff_format():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "ragvps", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, "run `ruff format ragvps tests bench`:\n" + result.stdout + result.stderr


def test_mypy_is_clean():
    if shutil.which("mypy") is None:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "mypy", "ragvps"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_any_written_in_app_and_serve():
    """mypy's disallow_any_explicit covers app/ and serve/ except the modules of pydantic shapes, which mypy cannot
    check so (pyproject.toml says why): in those too, no `Any` is imported or named (JSON values are `object`)."""
    import ast

    found = []
    for package in ("app", "serve"):
        for path in sorted((ROOT / "ragvps" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                named = (isinstance(node, ast.ImportFrom) and any(a.name == "Any" for a in node.names)) or (
                    isinstance(node, ast.Attribute) and node.attr == "Any"
                )
                if named:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "Any written in app/ or serve/: " + ", ".join(found)

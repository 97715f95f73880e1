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
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "ragvps", "tests", "bench"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    if shutil.which("mypy") is None:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "mypy", "ragvps"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr

"""One floor plan, kept true: docs/architecture.md has a row for every package of ragvps/ (each door of serve/
among them), every module, folder and test it names exists, and the README links it instead of keeping a plan of
its own. The wheel ships every package (pyproject.toml lists them by hand)."""

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
ROW = re.compile(r"^\| `(ragvps/(?:[\w]+/)*)` \| (.*) \|$", re.M)  # | `ragvps/serve/api/` | ... `routes.py` ... |
NAMED = re.compile(r"`([\w./]+(?:\.py|/))`")  # `core.py`, `formats/`, `ragvps/backends.py` in a row
# a path to a module or a test anywhere in the text: serve/openai/routes.py, ragvps/app/chat.py, tests/test_layers.py
PATH = re.compile(
    r"(?<![\w./-])((?:ragvps/)?(?:app|cli|config|data|db|embed|generate|ingest|measure|retrieve|serve)"
    r"/[\w/]*\.py|tests/\w+\.py|bench/\w+\.py)"
)


def packages() -> set[str]:
    """Every package of ragvps/ as `ragvps/x/y/`: a folder with an __init__.py (ragvps/sql, a link, followed)."""
    found = set()
    for folder, dirs, files in os.walk(ROOT / "ragvps", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if "__init__.py" in files:
            found.add(Path(folder).relative_to(ROOT).as_posix() + "/")
    return found


def rows() -> dict[str, str]:
    return {m[1]: m[2] for m in ROW.finditer(PLAN.read_text(encoding="utf-8"))}


def test_every_package_has_its_row_or_is_named_in_its_parents() -> None:
    plan = rows()
    missing = [
        p
        for p in sorted(packages())
        if p not in plan
        and f"`{p.rstrip('/').rsplit('/', 1)[1]}/`" not in plan.get(p.rstrip("/").rsplit("/", 1)[0] + "/", "")
    ]
    assert missing == [], f"docs/architecture.md's floor plan has no row for {missing}"


def test_every_door_of_serve_has_its_row() -> None:
    doors = {p for p in packages() if p.startswith("ragvps/serve/") and p.count("/") == 3}
    assert {"ragvps/serve/api/", "ragvps/serve/gate/", "ragvps/serve/shared/"} <= doors
    assert doors <= rows().keys()


def test_every_module_and_folder_the_plan_names_exists() -> None:
    gone = []
    for package, text in rows().items():
        for name in NAMED.findall(text):
            where = ROOT / name if name.startswith("ragvps/") else ROOT / package / name
            if not where.exists():
                gone.append(f"{package}: {name}")
    for doc in (PLAN, README):
        for name in PATH.findall(doc.read_text(encoding="utf-8")):
            where = ROOT / name if name.split("/")[0] in ("ragvps", "tests", "bench") else ROOT / "ragvps" / name
            if not where.exists():
                gone.append(f"{doc.name}: {name}")
    assert gone == [], "the floor plan names what is not there: " + ", ".join(gone)


def test_the_readme_links_the_plan_and_keeps_none_of_its_own() -> None:
    readme = README.read_text(encoding="utf-8")
    assert "(docs/architecture.md)" in readme
    assert not ROW.search(readme), "the README keeps a package table: the plan is docs/architecture.md's alone"
    for folder in re.findall(r"`(ragvps/[\w/]*)`", readme):
        assert (ROOT / folder).exists(), folder


def test_the_wheel_ships_every_package() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    assert {p.rstrip("/").replace("/", ".") for p in packages()} <= listed

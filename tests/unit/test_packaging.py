"""What a wheel installs (pyproject's [tool.setuptools]): every package folder and every data file.

The suite runs from an editable install, which finds every folder whatever pyproject lists; a
wheel (`pip install .`, a release) holds only what is listed, so a folder or a data file left out
would pass CI and fail its users at import.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_of(folder: Path) -> str:
    """The name a source folder installs as (tui/ as mlxhost_tui, per package-dir)."""
    for name, where in SETUPTOOLS["package-dir"].items():
        if folder == ROOT / where or (ROOT / where) in folder.parents:
            return ".".join([name, *folder.relative_to(ROOT / where).parts])
    raise AssertionError(f"{folder} is in no package-dir")


def test_every_folder_of_modules_is_a_listed_package() -> None:
    folders = {p.parent for where in SETUPTOOLS["package-dir"].values() for p in (ROOT / where).rglob("*.py")}
    assert all((folder / "__init__.py").is_file() for folder in folders), "a folder without __init__.py"
    assert sorted(package_of(f) for f in folders) == sorted(SETUPTOOLS["packages"])


def test_every_tracked_data_file_is_package_data() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", *SETUPTOOLS["package-dir"].values()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    data = sorted(name for name in tracked if not name.endswith(".py"))
    listed = sorted(
        str(Path(*package.split(".")) / pattern).replace("mlxhost_tui", "tui", 1)
        for package, patterns in SETUPTOOLS["package-data"].items()
        for pattern in patterns
    )
    assert data == listed

"""The shape of the package tree: small folders of small modules.

A folder holding more than 15 modules, or a module longer than 400 lines, is the sign of
a level or a concern that wants its own subpackage (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

import tessera

PACKAGE = Path(tessera.__file__).parent
MAX_MODULES_PER_FOLDER = 15
MAX_LINES_PER_MODULE = 400


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {}
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]:
        modules = list(folder.glob("*.py"))
        if len(modules) > MAX_MODULES_PER_FOLDER:
            crowded[str(folder.relative_to(PACKAGE.parent))] = len(modules)
    assert not crowded


def test_no_module_is_longer_than_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES_PER_MODULE}
    assert not long


def test_every_folder_of_the_package_is_a_package() -> None:
    """A folder without ``__init__.py`` would be left out of a regular install."""
    bare = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*")
            if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
            and not (p / "__init__.py").exists()]
    assert not bare

"""One version everywhere: CMakeLists.txt's project(pagedattn VERSION x.y.z) is the source; the wheel's
metadata and pagedattn.__version__ are generated from it at build time (pyproject.toml)."""

import re
from importlib.metadata import version
from pathlib import Path

import pytest

import pagedattn

CMAKELISTS = Path(__file__).resolve().parents[2] / "CMakeLists.txt"


def test_version_is_the_distribution_version():
    assert re.fullmatch(r"[0-9]+(\.[0-9]+)*", pagedattn.__version__), pagedattn.__version__
    assert pagedattn.__version__ == version("pagedattn")


def test_version_is_the_cmake_project_version():
    if not CMAKELISTS.is_file():
        pytest.skip(f"no source tree beside the tests ({CMAKELISTS} is missing)")
    m = re.search(r"project\(pagedattn\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)", CMAKELISTS.read_text())
    assert m, f"no project(pagedattn VERSION ...) in {CMAKELISTS}"
    assert pagedattn.__version__ == m.group(1)

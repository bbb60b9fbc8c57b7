"""The built wheel: one top-level package, `stallkit`, with every module and data file.

The wheel is built from a copy of the tree (links kept, as a checkout has them), installed
without dependencies into a fresh virtual environment, and asked what imports there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")
DATA = (
    "stallkit/kits/shipped/restore-stall.toml",
    "stallkit/kits/spaces/restore-stall.toml",
    "stallkit/engine/calibrations/tiny-vllm-cpu.json",
    "stallkit/monitor/grafana/stallkit-dashboard.json",
    # the corpus: a case, its kit, a trace a kit replays, an overlay's module
    "stallkit/kits/corpus/cases/vllm-45388.toml",
    "stallkit/kits/corpus/kits/vllm-45388.toml",
    "stallkit/kits/corpus/kits/vllm-57841.jsonl",
    "stallkit/kits/corpus/overlays/lmcache-3014/lmcache/v1/lookup_client/lmcache_lookup_client_bypass.py",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in (*ROLES, "stallkit"):
        shutil.copytree(
            REPO / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         str(src), "--wheel-dir", str(out)],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = out.glob("stallkit-*.whl")
    return found


def test_the_wheel_holds_one_top_level_package_with_every_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"stallkit"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["stallkit"]
    ours = {
        f"stallkit/{p.relative_to(REPO)}" for role in ROLES for p in (REPO / role).rglob("*.py")
    }
    assert ours | {"stallkit/__init__.py", "stallkit/__main__.py"} == {
        n for n in names if n.endswith(".py")
    }
    assert set(DATA) <= set(names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "kit = stallkit.kits.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_installed_only_the_stallkit_name_imports(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(site)  # what an installer puts in site-packages, dependencies aside
    probe = (
        "import importlib, json\n"
        "found = {}\n"
        "for name in ('engine', 'kits', 'contract', 'stallkit.engine.vllm_plugin'):\n"
        "    try:\n"
        "        found[name] = importlib.import_module(name).__file__\n"
        "    except ImportError:\n"
        "        found[name] = None\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    import json

    found = json.loads(done.stdout)
    assert found["engine"] is None and found["kits"] is None and found["contract"] is None
    assert found["stallkit.engine.vllm_plugin"].startswith(site)
    assert sorted(p.name for p in Path(site).iterdir() if not p.name.endswith(".dist-info")) == [
        "stallkit"
    ]

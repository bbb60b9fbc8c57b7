"""The twin's `layers` setting, without vLLM: the layouts it reads (segments in layer order,
the shipped presets), the ones it refuses in one line (a kit's through `kit ab --dry-run`, exit
2), and mamba layers refused rather than ignored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.layers import PRESETS, Layer, parse_layers

REPO = Path(__file__).resolve().parents[3]


def test_segments_are_read_in_layer_order() -> None:
    assert parse_layers("full:24") == (Layer(),) * 24
    layers = parse_layers(" sliding:2@4096, full:1 ,sliding:1@128")
    assert [layer.window for layer in layers] == [4096, 4096, None, 128]
    assert [layer.kind for layer in layers] == ["sliding", "sliding", "full", "sliding"]


@pytest.mark.parametrize(
    ("name", "layers", "full", "window"),
    [("gemma-3-27b", 62, 10, 1024), ("gpt-oss-20b", 24, 12, 128), ("gpt-oss-120b", 36, 18, 128)],
)
def test_presets_have_their_models_layer_counts(
    name: str, layers: int, full: int, window: int
) -> None:
    parsed = parse_layers(name)
    assert len(parsed) == layers
    assert sum(layer.window is None for layer in parsed) == full
    assert {layer.window for layer in parsed} == {None, window}
    assert parse_layers(PRESETS[name]) == parsed


def test_unset_is_the_default_and_a_preset_is_kept_by_name() -> None:
    assert TwinConfig().layers is None
    assert TwinConfig(layers="gpt-oss-20b").layers == "gpt-oss-20b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "does not parse"),
        ("full", "does not parse"),
        ("full:x", "does not parse"),
        ("full:2,", "does not parse"),
        ("full:-1", "does not parse"),
        ("full:0", "no layers"),
        ("global:4", "unknown layer kind 'global'"),
        ("full:4@128", "full layers take no window"),
        ("sliding:4", "sliding layers need a window"),
        ("sliding:4@0", "sliding layers need a window"),
        ("full:4097", "at most 4096"),
        ("full:2,mamba:2", "mamba layers are not supported by the twin yet"),
    ],
)
def test_a_layout_that_does_not_parse_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TwinConfig(layers=text)


def test_a_connector_over_a_layout_is_refused() -> None:
    with pytest.raises(ValidationError, match="not supported by the twin yet"):
        TwinConfig(layers="full:2", kv_transfer_config={"kv_connector": "OffloadingConnector"})


def _dry_run(tmp_path: Path, layers: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "kit.toml"
    text = f'name = "layers"\n[twin]\nlayers = "{layers}"\n[load]\nduration_s = 10\n'
    path.write_text(text, encoding="utf-8")
    argv = ["ab", "--kit", str(path), "--base", "twin:stock", "--fix", "twin:stock", "--dry-run"]
    return subprocess.run(
        [sys.executable, "-m", "stallkit", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_a_kits_bad_layout_is_one_line_naming_the_key(tmp_path: Path) -> None:
    done = _dry_run(tmp_path, "full:12,sliding:12")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: ") and "twin.layers" in lines[0]
    assert "sliding layers need a window" in lines[0]
    mamba = _dry_run(tmp_path, "mamba:4")
    assert mamba.returncode == 2 and "not supported by the twin yet" in mamba.stderr


def test_a_kits_good_layout_plans(tmp_path: Path) -> None:
    done = _dry_run(tmp_path, "gemma-3-27b")
    assert done.returncode == 0, (done.stdout, done.stderr)

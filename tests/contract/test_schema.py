"""`kit schema` and the published schemas: the real `kit` process prints or writes them, the
copies under docs/schema are what the models generate today, and bad input is one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema

from stallkit.contract.schema import run_dir_schemas, schema_file_name, schema_text
from tests.support import kit

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "schema"


def _kit(*args: str) -> subprocess.CompletedProcess[str]:
    return kit(*args, timeout=60)


def test_the_published_schemas_are_up_to_date() -> None:
    expected = {schema_file_name(name): schema_text(s) for name, s in run_dir_schemas().items()}
    published = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.schema.json")}
    stale = sorted(name for name in expected if published.get(name) != expected[name])
    assert stale == [], f"regenerate with `kit schema --out docs/schema`: {stale}"
    assert set(published) == set(expected)


def test_every_schema_is_a_valid_json_schema_naming_its_fields() -> None:
    for name, schema in run_dir_schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["title"], name
    meta = run_dir_schemas()["meta.json"]
    assert meta["additionalProperties"] is False
    assert "engine seconds" in meta["properties"]["engine_s"]["description"].lower()
    timeline = run_dir_schemas()["timeline.jsonl"]
    assert set(timeline["discriminator"]["mapping"]) == {
        "sample", "gpu", "down", "stall_started", "stall_ended", "stop_requested",
    }  # fmt: skip


def test_kit_schema_prints_them_and_writes_one_file_each(tmp_path: Path) -> None:
    printed = _kit("schema")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == run_dir_schemas()
    out = tmp_path / "schemas"
    written = _kit("schema", "--out", str(out))
    assert written.returncode == 0, written.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in DOCS.iterdir())
    for path in out.iterdir():
        assert path.read_text() == (DOCS / path.name).read_text(), path.name
    assert written.stdout.split() == [str(out / schema_file_name(n)) for n in run_dir_schemas()]


def test_kit_schema_into_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    done = _kit("schema", "--out", str(target))
    assert done.returncode == 2
    assert "is not a directory" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

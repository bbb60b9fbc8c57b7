"""What a first trial of `kit` meets when it gets something wrong: each answer names what was
given as it was given (the directory read, the --vary typed), says what a count must be, and
puts the nearest kit key beside a mistyped one, with where every kit key is described. Run as
real `kit` processes."""

from __future__ import annotations

from pathlib import Path

from tests.support import kit, one_error_line


def test_a_seed_count_of_zero_says_a_count_is_at_least_one() -> None:
    line = one_error_line(kit("ab", "--seeds", "0", "--dry-run"))
    assert "--seeds '0': a seed count must be N >= 1" in line
    assert "is not a seed count" not in line


def test_a_mistyped_kit_key_gets_the_nearest_key_and_where_keys_are(tmp_path: Path) -> None:
    kit_file = tmp_path / "mine.toml"
    kit_file.write_text("[load]\nagnets = 3\n")
    line = one_error_line(kit("ab", "--kit", str(kit_file), "--dry-run"))
    assert f"{kit_file}:2: load.agnets: unknown key" in line
    assert "did you mean load.agents?" in line and "kit schema" in line
    assert "--help" not in line  # which lists no kit keys
    # the same in a sweep's --vary, which also echoes what was typed, not its first value
    line = one_error_line(kit("sweep", "--vary", "agnets=1,2", "--out", str(tmp_path / "s")))
    assert line.startswith("error: --vary agnets=1,2: agnets: unknown key")
    assert "did you mean load.agents?" in line
    line = one_error_line(kit("sweep", "--vary", "load.agents=2,0", "--out", str(tmp_path / "s")))
    assert line.startswith("error: --vary load.agents=2,0: at 0, load.agents:")
    assert not (tmp_path / "s").exists()


def test_a_report_of_a_directory_without_a_run_names_it_and_the_commands(tmp_path: Path) -> None:
    line = one_error_line(kit("report", ".", cwd=tmp_path))
    assert f". ({tmp_path.resolve()}) holds no run" in line
    assert "kit ab" in line and "kit run" in line
    assert list(tmp_path.iterdir()) == []  # nothing written there

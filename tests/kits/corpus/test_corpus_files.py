"""A developer's own corpus cases, through real `kit` processes: a case file anywhere, its kit
and overlays found beside it (never from the working directory), a folder of them run with
--cases, a case with no fixed engine judged by the buggy engine alone ("no fix" in the table),
and every bad path or name one line with a hint, exit 2."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from stallkit.kits.corpus.case import load_case
from stallkit.kits.kit import KITS_DIR
from tests.support import kit, one_error_line

#: restore-stall's seed 15 spins at about 500 s on sim:base; sim:fix runs it clean
_CASE = """\
title = "{title}"
report = "mine#1"
kit = "../kits/my-kit.toml"
expect = "spinning"
seeds = [15]
why = "A prefill turn spins. Nothing fixes it yet."
[overrides]
"load.duration_s" = 1200
[buggy]
spec = "sim:base"
"""


def _tree(root: Path, *, fixed: bool) -> Path:
    """root/kits/my-kit.toml (a copy of restore-stall) and root/cases/{lone,fixed}.toml."""
    (root / "kits").mkdir(parents=True)
    (root / "cases").mkdir()
    text = (KITS_DIR / "restore-stall.toml").read_text()
    (root / "kits" / "my-kit.toml").write_text(text.replace('"restore-stall"', '"my-kit"', 1))
    (root / "cases" / "lone.toml").write_text(_CASE.format(title="spins, no fix"))
    if fixed:
        case = _CASE.format(title="spins, fixed") + '[fixed]\nspec = "sim:fix"\n'
        (root / "cases" / "fixed.toml").write_text(case.replace("Nothing", "The fix"))
    return root / "cases"


def test_show_reads_a_case_file_and_its_kit_beside_it(tmp_path: Path) -> None:
    cases = _tree(tmp_path / "mine", fixed=False)
    # from the folder above: the kit's ../kits is the case file's, not the working directory's
    assert cases.parent.parent == tmp_path
    done = kit("corpus", "show", "mine/cases/lone.toml", cwd=tmp_path, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "lone: spins, no fix" in done.stdout
    assert "fixed:    none (no fix yet)" in done.stdout
    assert "fixed by: not yet" in done.stdout
    kit_file = tmp_path.resolve() / "mine" / "kits" / "my-kit.toml"
    assert f"kit: my-kit ({kit_file}, with load.duration_s = 1200)" in " ".join(done.stdout.split())


def test_an_overlay_is_found_beside_the_case_file_before_the_corpus(tmp_path: Path) -> None:
    (tmp_path / "lmcache-3014").mkdir()  # a shipped overlay's name, shadowed beside the case
    (tmp_path / "case.toml").write_text(
        _CASE.replace("sim:base", "twin:stock")
        + '[fixed]\nspec = "twin:stock"\noverlay = "lmcache-3014"\n'
    )
    case = load_case(str(tmp_path / "case.toml"))
    assert case.name == "case" and case.fixed is not None
    assert case.overlays() == [f"fix={tmp_path.resolve() / 'lmcache-3014'}"]
    shipped = load_case("lmcache-3014")
    assert shipped.overlays()[0].endswith("corpus/overlays/lmcache-3014")


def test_a_folder_of_cases_runs_and_a_case_without_a_fix_reproduces_on_its_stall(
    tmp_path: Path,
) -> None:
    cases = _tree(tmp_path / "mine", fixed=True)
    out, report = tmp_path / "runs", tmp_path / "corpus.json"
    done = kit(
        "corpus", "run", "--cases", str(cases), "-o", str(out), "--json-out", str(report),
        env={"COLUMNS": "200"}, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = {c["case"]: c for c in json.loads(report.read_text())["cases"]}
    assert set(outcomes) == {"fixed", "lone"}
    lone, fixed = outcomes["lone"], outcomes["fixed"]
    assert lone["status"] == "reproduced", lone["reason"]
    assert lone["has_fix"] is False and lone["fixed"] is None
    assert lone["buggy"]["stalled"] == 1 and lone["buggy"]["kinds"] == ["spinning"]
    assert fixed["status"] == "reproduced" and fixed["fixed"]["stalled"] == 0
    row = next(line for line in done.stdout.splitlines() if line.split()[:2] == ["lone", "│"])
    assert "no fix" in row and "1/1" in row
    assert (out / "lone" / "run.json").is_file()  # one arm: a run, no A/B


def test_a_case_without_a_fix_whose_engine_does_not_stall_is_not_reproduced(
    tmp_path: Path,
) -> None:
    cases = _tree(tmp_path / "mine", fixed=False)
    lone = cases / "lone.toml"
    # two seeds of one arm: the run's report reads both (its kit.json sits beside them)
    lone.write_text(lone.read_text().replace("sim:base", "sim:fix").replace("[15]", "[15, 16]"))
    report = tmp_path / "corpus.json"
    done = kit(
        "corpus", "run", str(lone), "-o", str(tmp_path / "runs"), "--json-out", str(report),
        timeout=170,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the buggy engine did not stall" in done.stdout
    (outcome,) = json.loads(report.read_text())["cases"]
    assert (outcome["buggy"]["seeds"], outcome["buggy"]["stalled"]) == (2, 0)


def test_bad_case_paths_and_folders_are_one_line_with_a_hint(tmp_path: Path) -> None:
    line = one_error_line(kit("corpus", "show", "./no-such-case.toml"))
    assert "no case file ./no-such-case.toml" in line
    line = one_error_line(kit("corpus", "show", "no-such-case"))
    assert "no corpus case named 'no-such-case'" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(kit("corpus", "run", "--cases", str(tmp_path / "empty")))
    assert "no case file (*.toml) in it" in line
    line = one_error_line(kit("corpus", "run", str(tmp_path / "empty")))
    assert "(a folder: give it with --cases)" in line
    # a kit path that is not there, and a key a case does not have
    cases = _tree(tmp_path / "mine", fixed=False)
    shutil.rmtree(tmp_path / "mine" / "kits")
    line = one_error_line(kit("corpus", "show", str(cases / "lone.toml")))
    assert "my-kit.toml" in line
    bad = tmp_path / "bad.toml"
    bad.write_text(_CASE + "colour = 'red'\n")
    line = one_error_line(kit("corpus", "show", str(bad)))
    assert "case " in line and "colour" in line
    # two cases of one name would write one run directory
    twin = tmp_path / "other"
    twin.mkdir()
    (twin / "lone.toml").write_text(textwrap.dedent(_CASE))
    line = one_error_line(
        kit("corpus", "run", str(twin / "lone.toml"), "--cases", str(cases), "-o", "x")
    )
    assert "two cases are named lone" in line

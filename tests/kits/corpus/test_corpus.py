"""The stall corpus: shipped cases are well formed, and the runner judges a case by what its
engines did (on the simulator here, which needs no vLLM; the shipped cases run in
tests/vllm/test_corpus_cases.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from stallkit.contract.corpus import CaseOutcome, CorpusFile
from stallkit.kits.cli import app
from stallkit.kits.corpus.case import CASES_DIR, Case, CaseEngine, case_names, load_case
from stallkit.kits.corpus.execute import run_cases
from stallkit.kits.kit import load_kit
from tests.support import REPO


@pytest.mark.parametrize("name", case_names())
def test_a_shipped_case_names_its_report_its_fix_and_a_kit_that_loads(name: str) -> None:
    case = load_case(name)
    assert case.name == name
    assert "#" in case.report or case.report in ("fork", "stallkit")
    assert case.why.count(". ") >= 1, "what went wrong, then what fixed it"
    assert case.fixed is not None, "every shipped case has its fix"
    assert case.buggy.spec != case.fixed.spec or case.buggy.overlay != case.fixed.overlay
    kit = load_kit(case.kit_ref(), dict(case.overrides))
    assert kit.load.duration_s is None or kit.load.duration_s > 0
    for overlay in case.overlays():
        assert Path(overlay.partition("=")[2]).is_dir(), overlay


def test_the_corpus_lists_every_case_file() -> None:
    assert case_names() == sorted(p.stem for p in CASES_DIR.glob("*.toml"))
    assert "fork-livelock" in case_names()
    done = CliRunner().invoke(app, ["corpus", "list"])
    assert done.exit_code == 0, done.output
    for name in case_names():
        assert name in done.output


def _sim_case(buggy: str, fixed: str) -> Case:
    # restore-stall's seed 15 spins at about 500 s on sim:base; sim:fix runs clean
    return Case(
        name="sim-livelock",
        title="the fork's livelock on the simulator",
        report="fork",
        fixed_by="policy fix",
        kit="restore-stall",
        expect="spinning",
        seeds=2,
        overrides={"load.seed": 15, "load.duration_s": 1200},
        why="A prefill turn spins. The fix preempts.",
        buggy=CaseEngine(spec=buggy),
        fixed=CaseEngine(spec=fixed),
    )


def _run(case: Case, out: Path) -> tuple[bool, list[CaseOutcome], list[str]]:
    outcomes: list[CaseOutcome] = []
    started: list[str] = []
    done = run_cases([case], out, lambda c: started.append(c.name), outcomes.append)
    return done, outcomes, started


def test_a_case_reproduces_when_the_buggy_engine_stalls_and_the_fixed_one_does_not(
    tmp_path: Path,
) -> None:
    done, outcomes, started = _run(_sim_case("sim:base", "sim:fix"), tmp_path / "corpus")
    assert done and started == ["sim-livelock"]
    (outcome,) = outcomes
    assert outcome.status == "reproduced", outcome.reason
    assert outcome.buggy is not None and outcome.fixed is not None
    assert outcome.buggy.stalled >= 1 and set(outcome.buggy.kinds) == {"spinning"}
    assert outcome.buggy.first_onset_s is not None and outcome.buggy.first_onset_s < 1200
    assert (outcome.fixed.stalled, outcome.fixed.censored, outcome.fixed.seeds) == (0, 0, 2)
    # the A/B is kept where the outcome says, with its report
    assert outcome.run_dir is not None
    assert json.loads((Path(outcome.run_dir) / "ab.json").read_text())["kit"] == "restore-stall"


def test_a_case_whose_fixed_engine_stalls_does_not_reproduce(tmp_path: Path) -> None:
    _, outcomes, _ = _run(_sim_case("sim:fix", "sim:base"), tmp_path / "corpus")
    (outcome,) = outcomes
    assert outcome.status == "not_reproduced"
    assert "the buggy engine did not stall" in outcome.reason
    assert "the fixed engine stalled in" in outcome.reason


def test_a_case_stalling_as_another_kind_does_not_reproduce(tmp_path: Path) -> None:
    case = _sim_case("sim:base", "sim:fix").model_copy(update={"expect": "blocked"})
    _, outcomes, _ = _run(case, tmp_path / "corpus")
    (outcome,) = outcomes
    assert outcome.status == "not_reproduced"
    assert "stalled as spinning, not blocked" in outcome.reason


def test_a_case_needing_an_extra_that_is_missing_is_skipped_and_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stallkit.kits.corpus import case as case_module

    monkeypatch.setitem(case_module.EXTRAS, "lmcache", ("no_such_module_here", "pip install x"))
    case = _sim_case("sim:base", "sim:fix").model_copy(update={"requires": ["lmcache"]})
    _, outcomes, started = _run(case, tmp_path / "corpus")
    (outcome,) = outcomes
    assert started == [] and outcome.status == "skipped"
    assert outcome.reason == "needs lmcache: pip install x"
    assert not (tmp_path / "corpus").exists()
    # the outcome file round-trips through its model
    again = CorpusFile.model_validate_json(CorpusFile(cases=outcomes).model_dump_json())
    assert again.cases == outcomes


def test_the_published_case_schema_describes_every_key_and_holds_every_shipped_case() -> None:
    schema = json.loads((REPO / "docs" / "schema" / "case.schema.json").read_text())
    engine = schema["$defs"]["CaseEngine"]
    for key, prop in [*schema["properties"].items(), *engine["properties"].items()]:
        assert prop.get("description"), key
    assert "fixed" not in schema["required"] and "buggy" in schema["required"]
    for name in case_names():
        jsonschema.validate(tomllib.loads((CASES_DIR / f"{name}.toml").read_text()), schema)
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.validate({**tomllib.loads((CASES_DIR / "vllm-45388.toml").read_text()),
                             "colour": "red"}, schema)  # fmt: skip

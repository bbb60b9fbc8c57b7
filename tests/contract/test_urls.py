"""One rule for engine URLs: the same mistake reads the same in kit load, kit monitor and url:."""

from __future__ import annotations

import pytest

from stallkit.contract.urls import url_problem
from stallkit.engine.errors import EngineError
from stallkit.engine.spec import parse_spec
from tests.support import kit


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "https://gpu-box:443/", "http://[::1]:9000", "http://h/v1"]
)
def test_requestable_urls_have_no_problem(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("127.0.0.1:8000", "no scheme"),
        ("localhost:8000", "no scheme"),  # parsed as the scheme `localhost`
        ("notaurl", "no scheme"),
        ("", "no scheme"),
        ("ftp://127.0.0.1:21/", "unsupported URL scheme 'ftp'"),
        ("http:///metrics", "no host"),
        ("http://h:abc", "port is not a number"),
        ("http://h:70000", "port is not a number"),
        ("http://[::1", "does not parse"),
        ("http://[bad]:80", "does not parse"),
    ],
)
def test_each_mistake_is_named(url: str, problem: str) -> None:
    found = url_problem(url)
    assert found is not None and problem in found


def test_the_url_spec_names_the_same_problem() -> None:
    with pytest.raises(EngineError, match="unsupported URL scheme 'ftp'"):
        parse_spec("url:ftp://127.0.0.1:21")
    with pytest.raises(EngineError, match="port is not a number"):
        parse_spec("url:http://127.0.0.1:x")
    assert parse_spec("url:http://127.0.0.1:8000/").target == "http://127.0.0.1:8000"


@pytest.mark.parametrize("command", ["monitor", "load"])
@pytest.mark.parametrize(
    ("url", "says"),
    [("localhost:8000", "no scheme"), ("http://", "no host"), ("http://:8000", "no host")],
)
def test_kit_monitor_and_kit_load_refuse_a_bad_url_in_one_line(
    command: str, url: str, says: str
) -> None:
    """The same words for the same URL, quoted as the user wrote it."""
    done = kit(command, url, "--duration", "1", timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert (
        f"bad URL {url!r}: the URL has {says}" in lines[0] and "http://127.0.0.1:8000" in lines[0]
    )

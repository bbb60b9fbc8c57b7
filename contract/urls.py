"""What makes an engine URL one the tool can request, said once for every role.

`kit load`, `kit monitor` and the `url:` engine spec all take an engine's base URL from the
user; each asks `url_problem` and reports the answer in its own error, so the same mistake
(`127.0.0.1:8000` without `http://`, an `ftp://` URL, a port that is not a number) reads the
same everywhere. Standard library only.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["URL_HINT", "url_problem"]

#: the hint that goes with any of the problems below
URL_HINT = "e.g. http://127.0.0.1:8000"


def url_problem(url: str) -> str | None:
    """Why `url` cannot be requested over HTTP, in a few words; None when it can."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # e.g. an unclosed `[` of an IPv6 host
        return "the URL does not parse"
    if parts.scheme not in ("http", "https"):
        if parts.scheme and parts.netloc:
            return f"unsupported URL scheme {parts.scheme!r} (use http:// or https://)"
        # `localhost:8000` parses as scheme `localhost`: what is missing is the scheme
        return "the URL has no scheme (use http:// or https://)"
    if not parts.hostname:
        return "the URL has no host"
    try:
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError:
        return "the URL's port is not a number from 0 to 65535"
    return None

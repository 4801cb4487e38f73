"""What a model server's answer must be to be used, and what its url must be: the checks the
HTTP providers (http.py) make of every answer, each failure a ModelAnswerInvalid that names the
url and what is wrong, and of every url as a spec gives it (InvalidRequest)."""

from __future__ import annotations

import json
import urllib.parse
from typing import TYPE_CHECKING, Any

from metis_lite.errors import InvalidRequest, ModelAnswerInvalid

if TYPE_CHECKING:  # imported where it computes: a search by words never needs NumPy
    import numpy as np

URL_SHOWN_CHARS = 200
"""How much of a refused url a message quotes."""


def check_url(url: object, *, what: str = "model url") -> str:
    """The url of a model server as httpx will read it, else InvalidRequest saying what is wrong:
    http or https, a host, a port that is a number, no space or control character, no user or
    password (a key goes in api_key_env), no query or fragment (paths are added to it)."""
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"{what} must be text, not {url!r}")
    shown = repr(url[:URL_SHOWN_CHARS])
    if any(c.isspace() or c < " " or c == "\x7f" for c in url):
        raise InvalidRequest(f"{what} {shown} must not hold spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number, or out of range, raises here
    except ValueError as exc:
        raise InvalidRequest(f"{what} {shown} is not a url ({exc})") from None
    if parts.scheme not in ("http", "https") or not url.lower().startswith(parts.scheme + "://"):
        raise InvalidRequest(f"{what} must start with http:// or https://, not {shown}")
    if not parts.hostname:
        raise InvalidRequest(f"{what} {shown} names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(
            f"{what} must not hold a user or password: put the key in an environment variable"
            " and name it in api_key_env"
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise InvalidRequest(f"{what} {shown} must not hold ? or #: it is the API's base url")
    import httpx  # here: a search with the embedded model never imports the HTTP stack

    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise InvalidRequest(f"{what} {shown} is not a url ({exc})") from None
    return url


def provider_name(protocol: str, url: str, model: str | None) -> str:
    """The name a provider records on what it makes: the model's name, else "protocol@url".

    The model's name alone identifies the vector space, whichever server or transport serves it;
    a TEI server needs no model name, and then its url is the only stable thing to record.
    """
    return model if model else f"{protocol}@{url.rstrip('/')}"


def decoded(raw: bytes, target: str) -> Any:
    """JSON → Python; NaN and Infinity literals (which Python's json accepts) are refused."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelAnswerInvalid(f"{target}: the answer is not valid JSON ({exc})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def an_object(entry: Any, target: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ModelAnswerInvalid(f"{target}: expected objects in the answer, got {kind_of(entry)}")
    return entry


def field_of(container: Any, key: str, kind: type | tuple[type, ...], target: str) -> Any:
    """container[key], which must be of `kind` (bool never counts as a number)."""
    if not isinstance(container, dict):
        raise ModelAnswerInvalid(
            f"{target}: expected an object with '{key}', got {kind_of(container)}"
        )
    if key not in container:
        raise ModelAnswerInvalid(f"{target}: the answer has no '{key}'")
    value = container[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ModelAnswerInvalid(f"{target}: '{key}' is {kind_of(value)}")
    return value


def checked_indexes(indexes: list[int], n: int, target: str, what: str) -> list[int]:
    """Indexes that name each of 0..n-1 exactly once, else ModelAnswerInvalid."""
    if len(indexes) != n:
        raise ModelAnswerInvalid(f"{target}: {len(indexes)} {what} for {n} texts")
    seen: set[int] = set()
    for index in indexes:
        if not 0 <= index < n:
            raise ModelAnswerInvalid(f"{target}: index {index} is out of range for {n} texts")
        if index in seen:
            raise ModelAnswerInvalid(f"{target}: index {index} appears twice")
        seen.add(index)
    return indexes


def matrix_of(rows: Any, target: str) -> np.ndarray:
    """A list of equal-length lists of finite numbers → float64 matrix, else ModelAnswerInvalid."""
    import numpy as np

    if not all(isinstance(row, list) and row for row in rows):
        raise ModelAnswerInvalid(f"{target}: vectors must be non-empty lists of numbers")
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise ModelAnswerInvalid(
            f"{target}: vectors of different dimensions in one answer ({sorted(widths)})"
        )
    try:
        matrix = np.asarray(rows)
    except (ValueError, TypeError):
        raise ModelAnswerInvalid(f"{target}: vectors must be lists of numbers") from None
    if matrix.ndim != 2 or matrix.dtype.kind not in "iuf":
        raise ModelAnswerInvalid(f"{target}: vectors must be lists of numbers")
    matrix = matrix.astype(np.float64, copy=False)
    if not np.all(np.isfinite(matrix)):
        raise ModelAnswerInvalid(f"{target}: a vector holds NaN or infinity")
    return matrix

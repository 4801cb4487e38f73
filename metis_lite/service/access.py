"""Who may search what: the service's access tokens, each allowed a set of bases.

Tokens come from a file (`--tokens FILE`) or the environment (`METIS_TOKENS`), never from the
command line (where `ps` would show them), in one shape:

    {"tokens": [{"token": "…at least 16 characters…", "bases": ["handbook"]},
                {"token": "…", "bases": ["*"]}]}

A request's bearer token is compared with every configured token in constant time
(`hmac.compare_digest`, no early exit), so the time taken says nothing about how much of a
guess was right. Without tokens the service answers only on loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from metis_lite.errors import AccessError, Forbidden, InvalidRequest

TOKENS_ENV = "METIS_TOKENS"
"""The environment variable that may hold the tokens' JSON instead of a file."""

TOKEN_MIN_CHARS = 16
"""A shorter token is refused at start: it could be guessed."""

ALL_BASES = "*"

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Grant:
    """One token and the bases it may list, search and index (`*`: every base)."""

    token: bytes
    bases: frozenset[str]

    def allows(self, base: str) -> bool:
        return ALL_BASES in self.bases or base in self.bases


OPEN = Grant(b"", frozenset({ALL_BASES}))
"""What a request may do on a service without tokens (loopback only)."""


class Tokens:
    """The configured grants; `check` turns an Authorization header into the request's Grant."""

    def __init__(self, grants: Iterable[Grant]) -> None:
        self.grants = tuple(grants)

    @property
    def configured(self) -> bool:
        return bool(self.grants)

    def check(self, authorization: str | None) -> Grant:
        """The grant of a `Bearer <token>` header; UNAUTHORIZED when missing or unknown."""
        if not self.grants:
            return OPEN
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise AccessError("this service needs a token: send Authorization: Bearer <token>")
        candidate = given.strip().encode("latin-1", "replace")  # the header's bytes as sent
        found: Grant | None = None
        for grant in self.grants:  # every token is compared, whichever matches
            if hmac.compare_digest(candidate, grant.token) and found is None:
                found = grant
        if found is None:
            raise AccessError("unknown token")
        return found


def may(grant: Grant, base: str) -> None:
    """Refuse (FORBIDDEN) a base the grant does not name."""
    if not grant.allows(base):
        raise Forbidden(f"this token may not use the base {base!r}")


def parse_tokens(text: str, *, origin: str) -> Tokens:
    """Read the tokens' JSON; every mistake is refused with what to fix (InvalidRequest)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"{origin} is not JSON: {exc}") from None
    entries = data.get("tokens") if isinstance(data, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidRequest(
            f'{origin} must hold {{"tokens": [{{"token": "...", "bases": ["NAME" or "*"]}}]}}'
        )
    grants = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, Mapping) or set(entry) != {"token", "bases"}:
            raise InvalidRequest(f"{origin}: token {n} must have exactly 'token' and 'bases'")
        token, bases = entry["token"], entry["bases"]
        if not isinstance(token, str) or len(token.strip()) < TOKEN_MIN_CHARS:
            raise InvalidRequest(
                f"{origin}: token {n} must be text of at least {TOKEN_MIN_CHARS} characters"
            )
        if token != token.strip() or any(c.isspace() for c in token):
            raise InvalidRequest(f"{origin}: token {n} must not hold spaces")
        if not (token.isascii() and token.isprintable()):
            # An HTTP header carries ASCII: a token of other characters could never match.
            raise InvalidRequest(f"{origin}: token {n} must be printable ASCII characters only")
        if token in seen:
            raise InvalidRequest(f"{origin}: token {n} is given twice")
        seen.add(token)
        if (
            not isinstance(bases, list)
            or not bases
            or not all(isinstance(b, str) and b for b in bases)
        ):
            raise InvalidRequest(f"{origin}: token {n} needs 'bases': a list of names, or ['*']")
        grants.append(Grant(token.encode("utf-8"), frozenset(bases)))
    return Tokens(grants)


def load_tokens(tokens_file: str | Path | None, environ: Mapping[str, str] | None = None) -> Tokens:
    """The tokens of `--tokens FILE` or of METIS_TOKENS; none when neither is set."""
    from_env = (environ or {}).get(TOKENS_ENV)
    if tokens_file is not None and from_env:
        raise InvalidRequest(
            f"tokens are given both in {tokens_file} and in {TOKENS_ENV}: keep one of them"
        )
    if tokens_file is not None:
        try:
            text = Path(tokens_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"cannot read the tokens file {tokens_file}: {exc}") from None
        return parse_tokens(text, origin=str(tokens_file))
    if from_env:
        return parse_tokens(from_env, origin=TOKENS_ENV)
    return Tokens(())


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address (127.0.0.0/8, ::1)."""
    name = host.strip("[]")
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_binding(host: str, tokens: Tokens) -> None:
    """Refuse to listen beyond loopback without tokens: anyone on the network could search."""
    if not tokens.configured and not is_loopback(host):
        raise InvalidRequest(
            f"refusing to serve on {host} without access tokens: anyone who can reach it could "
            f"search every base. Give tokens with --tokens FILE or {TOKENS_ENV}, "
            "or bind 127.0.0.1"
        )


def host_is_loopback_name(host_header: str | None) -> bool:
    """True when a request's Host header names the service by a loopback name or address.

    Checked when no tokens are set: a web page whose own domain resolves to 127.0.0.1 (DNS
    rebinding) sends its own name as Host and is refused.
    """
    if not host_header:
        return True
    host = host_header.strip()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False

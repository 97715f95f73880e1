"""A source's credentials, apart from its location: `split` takes `user:password@` out of a URL (what is stored and
shown is the URL without it), `seal` encrypts a credential for the source's record (Fernet, with a key kept 0600
in data_dir/source.key, made on first use) and `unseal` reads it back for the sync; `scrub` takes the server's
own paths out of a message a reader may see."""

from __future__ import annotations

import base64
import os
import re
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ragvps.errors import ConfigError, UsageError

KEY_FILE = "source.key"
# query parameters that carry a secret: refused in a location (they would be shown to every reader)
_SECRET_QUERY = re.compile(
    r"(^|[-_.])(token|key|secret|password|passwd|pwd|sig|signature|auth|credential|session)s?($|[-_.])|^x-amz-",
    re.IGNORECASE,
)


def split(location: str) -> tuple[str, str]:
    """(the location without `user:password@`, that credential as `user:password`, or "")."""
    parts = urlsplit(location)
    if not parts.scheme or "@" not in parts.netloc:
        return location, ""
    userinfo, _, host = parts.netloc.rpartition("@")
    if parts.scheme not in ("http", "https") and ":" not in userinfo:
        return location, ""  # ssh://git@host/...: a user name, no secret
    return urlunsplit(parts._replace(netloc=host)), unquote(userinfo)


def check_query(location: str, what: str) -> None:
    """A UsageError when the location's query carries something that looks like a secret."""
    names = [name for name, _ in parse_qsl(urlsplit(location).query, keep_blank_values=True)]
    secret = [n for n in names if _SECRET_QUERY.search(n)]
    if secret:
        raise UsageError(
            f"{what}: the URL's query carries {', '.join(sorted(set(secret)))}, which every reader of the knowledge "
            "base would see; give credentials apart (user:password@ in the URL is kept encrypted, never shown)"
        )


def redact(location: str) -> str:
    """A location as a reader may see it: no userinfo."""
    return split(location)[0]


def _key(data_dir: Path) -> bytes:
    path = data_dir / KEY_FILE
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(
            f"cannot read the source key {path} ({exc.__class__.__name__}): make data_dir readable",
            settings=("data_dir",),
        ) from None
    key = base64.urlsafe_b64encode(secrets.token_bytes(32))  # a Fernet key
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
    except FileExistsError:  # another process made it first
        return path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot write the source key {path} ({exc.__class__.__name__}): make data_dir writable",
            settings=("data_dir",),
        ) from None
    return key


def seal(data_dir: Path, credential: str) -> str:
    from cryptography.fernet import Fernet  # lazy: only adding a source with a credential needs it

    return Fernet(_key(data_dir)).encrypt(credential.encode()).decode("ascii")


def unseal(data_dir: Path, sealed: str) -> str:
    from cryptography.fernet import Fernet, InvalidToken  # lazy: only a sync of a source with a credential needs it

    try:
        return Fernet(_key(data_dir)).decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, ValueError):
        raise ConfigError(
            f"a source's credential cannot be read with {data_dir / KEY_FILE} (the key changed): give the "
            "source's credential again (remove and add it)",
            settings=("data_dir",),
        ) from None


def scrub(message: str, *paths: Path) -> str:
    """`message` without the server's paths (each shown as its last part)."""
    for path in sorted({str(p) for p in paths} | {str(p.resolve()) for p in paths}, key=len, reverse=True):
        message = message.replace(path + "/", "").replace(path, "…")
    return message

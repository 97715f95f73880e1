"""AWS Signature Version 4 for S3 GET requests, and the credentials from the usual places (the AWS_* environment,
then the shared credentials file): enough of the S3 API for a bucket source without boto3 (about 23 MB)."""

from __future__ import annotations

import configparser
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

from ragvps.errors import ConfigError

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    token: str = field(default="", repr=False)


def credentials(env: dict[str, str] | None = None) -> Credentials | None:
    """AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else the profile AWS_PROFILE (or default)
    of the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials); None: unsigned requests."""
    env = dict(os.environ) if env is None else env
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN", ""))
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error:
        return None
    profile = env.get("AWS_PROFILE") or "default"
    if parser.has_option(profile, "aws_access_key_id") and parser.has_option(profile, "aws_secret_access_key"):
        return Credentials(
            parser.get(profile, "aws_access_key_id"),
            parser.get(profile, "aws_secret_access_key"),
            parser.get(profile, "aws_session_token", fallback=""),
        )
    return None


def encoded(creds: Credentials | None) -> str:
    """Credentials as one string (a source's sealed credential), "" for none."""
    return "\n".join((creds.access_key, creds.secret_key, creds.token)) if creds else ""


def decoded(text: str) -> Credentials | None:
    parts = text.split("\n")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    return Credentials(parts[0], parts[1], parts[2] if len(parts) > 2 else "")


def profile(path: str, name: str, kb: str) -> Credentials:
    """The credentials named `name` in the server's table (source_credentials_file), when it lets `kb` use them."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        found = parser.read(path) if path else []
    except configparser.Error:
        found = []
    if not found or not parser.has_section(name):
        raise ConfigError(
            f"no credentials named {name!r} in source_credentials_file ({path or 'not set'}): the server's "
            "owner adds them there, or the source is added with its own",
            settings=("source_credentials_file",),
        )
    kbs = {k.strip() for k in parser.get(name, "knowledge_bases", fallback="").split(",") if k.strip()}
    if kb not in kbs and "*" not in kbs:
        raise ConfigError(
            f"credentials {name!r} are not for knowledge base {kb}: the server's owner lists it in their "
            "knowledge_bases in source_credentials_file",
            settings=("source_credentials_file",),
        )
    creds = credentials(
        {
            "AWS_ACCESS_KEY_ID": parser.get(name, "aws_access_key_id", fallback=""),
            "AWS_SECRET_ACCESS_KEY": parser.get(name, "aws_secret_access_key", fallback=""),
            "AWS_SESSION_TOKEN": parser.get(name, "aws_session_token", fallback=""),
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    if creds is None:
        raise ConfigError(f"credentials {name!r} in {path} lack aws_access_key_id or aws_secret_access_key")
    return creds


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(
    url: str, region: str, creds: Credentials, now: datetime | None = None, service: str = "s3"
) -> dict[str, str]:
    """The headers that sign a GET of `url` (its path already percent-encoded as it is sent)."""
    now = now or datetime.now(UTC)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    parts = urlsplit(url)
    query = sorted(tuple(p.split("=", 1)) if "=" in p else (p, "") for p in parts.query.split("&") if p)
    canonical_query = "&".join(f"{k}={v}" for k, v in query)
    headers = {"host": parts.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if creds.token:
        headers["x-amz-security-token"] = creds.token
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "GET",
            parts.path or "/",
            canonical_query,
            "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers)),
            names,
            EMPTY_SHA256,
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{creds.secret_key}".encode(), day), region), service), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    del headers["host"]  # httpx sends it
    return headers


def encode(value: str, safe: str = "-_.~") -> str:
    """Percent-encoding as SigV4 wants it (RFC 3986 unreserved characters kept)."""
    return quote(value, safe=safe)

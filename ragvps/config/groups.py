"""The settings' groups: each field with its facts beside it (`setting(...)`: flat name, range, secret, choices,
old names). ragvps.config.schema builds the tables from them; backends come from ragvps.backends."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from ragvps import backends

log = logging.getLogger(__name__)


VectorType = Literal["vector", "halfvec", "bit"]
ChunkMode = Literal["structure", "fixed", "sentences"]

CONFIG_FILE = "ragvps.toml"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "nomic-embed-text"


def setting(
    default: Any,
    name: str,
    *,
    lo: float | None = None,
    hi: float | str | None = None,
    secret: bool = False,
    choices: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
) -> Any:
    """A field and its facts: its flat name, its range (`hi` may name the setting that bounds it), whether it
    is a secret (never shown), its choices, and old flat names still accepted (with a warning)."""
    return field(
        default=default,
        repr=not secret,
        metadata={
            "name": name,
            "range": None if lo is None else (lo, hi),
            "secret": secret,
            "choices": choices,
            "aliases": aliases,
        },
    )


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = setting("", "database_url", secret=True)  # empty: the embedded PostgreSQL under data_dir
    data_dir: Path = setting(Path(".ragvps"), "data_dir")
    pool_size: int = setting(4, "pool_size", lo=1, hi=1000)  # connections a long-running server keeps
    kb: str = setting("default", "kb")  # the knowledge base a command reads or writes (`--kb`, RAGVPS_KB)
    # hot standbys a server reads searches and answers from (docs/configuration.md#read-replicas)
    replica_urls: tuple[str, ...] = setting((), "database_replica_urls", secret=True)
    replica_max_lag: float = setting(10.0, "replica_max_lag", lo=0, hi=86_400)  # seconds behind: then skipped
    replica_wait: float = setting(1.0, "replica_wait", lo=0, hi=60)  # seconds a read waits for its own writes

    @property
    def pg_dir(self) -> Path:
        return self.data_dir / "pg"

    @property
    def kb_dir(self) -> Path:
        """The knowledge base's stage files (chunks, the vector cache): its own folder, removed with it."""
        return self.data_dir / "kb" / self.kb


@dataclass(frozen=True)
class EmbedSettings:
    kind: str = setting("multilingual", "embedder", choices=tuple(backends.EMBEDDERS))
    ollama_urls: tuple[str, ...] = setting((DEFAULT_OLLAMA_URL,), "ollama_url")  # several hosts, one model
    model: str = setting(DEFAULT_OLLAMA_MODEL, "embed_model")  # the Ollama model; the in-process models are fixed
    batch_size: int = setting(32, "batch_size", lo=1, hi=10_000)
    keep_alive: str = setting("30m", "keep_alive")
    timeout: int = setting(120, "ollama_timeout", lo=1, hi=86_400)  # seconds for one /api/embed request
    retries: int = setting(4, "ollama_retries", lo=0, hi=20)  # on connection errors, timeouts, 5xx; with backoff
    document_prefix: str | None = setting(None, "document_prefix")  # None: the model's own (nomic: "search_document: ")
    query_prefix: str | None = setting(None, "query_prefix")
    threads: int = setting(0, "threads", lo=0, hi=1024)  # onnxruntime intra-op threads; 0: one per core
    sub_batch: int = setting(8, "sub_batch", lo=1, hi=1024)  # local model: texts per onnxruntime call (peak memory)
    defer_embedding: bool = setting(False, "defer_embedding")  # ingest queues chunks for `ragvps worker`
    worker_lease: int = setting(600, "worker_lease", lo=1, hi=86_400)  # seconds a worker holds a claimed batch
    # workers that may die (their lease run out) reading one uploaded file before it fails instead of looping
    worker_max_attempts: int = setting(3, "worker_max_attempts", lo=1, hi=1000)
    # uploaded files a worker reads, embeds and stores together (16 MB at most); see docs/documents-api.md
    upload_batch_files: int = setting(256, "upload_batch_files", lo=1, hi=100_000)

    @property
    def backend(self) -> backends.Backend:
        return backends.EMBEDDERS[self.kind]

    @property
    def model_name(self) -> str:
        return self.backend.model or self.model

    @property
    def ollama_url(self) -> str:
        return self.ollama_urls[0]


@dataclass(frozen=True)
class ChunkSettings:
    mode: ChunkMode = setting("structure", "chunk_mode", choices=get_args(ChunkMode))
    size: int | None = setting(None, "chunk_size")  # None: the embedder's default
    overlap: int | None = setting(None, "chunk_overlap")
    # what a reader may produce from one file (docs/security.md): characters per packed byte, and in all
    max_text_ratio: int = setting(100, "max_text_ratio", lo=1, hi=1_000_000)
    max_text_chars: int = setting(256 << 20, "max_text_chars", lo=1024, hi=1 << 40)
    follow_symlinks: bool = setting(False, "follow_symlinks")  # links whose target leaves the ingested folder
    ocr_languages: str = setting("eng", "ocr_languages")  # Tesseract's, for scans and images: `eng+deu`
    ocr_figures: bool = setting(False, "ocr_figures")  # also OCR the large images of PDF pages that have text
    # what reading one PDF may take (docs/security.md): pages, seconds a page and a file, the reader's memory
    pdf_max_pages: int = setting(10_000, "pdf_max_pages", lo=1, hi=10_000_000)
    pdf_page_seconds: float = setting(60.0, "pdf_page_seconds", lo=0.1, hi=86_400)
    pdf_file_seconds: float = setting(600.0, "pdf_file_seconds", lo=0.1, hi=604_800)
    pdf_max_memory_mb: int = setting(1024, "pdf_max_memory_mb", lo=64, hi=1 << 20)


@dataclass(frozen=True)
class IndexSettings:
    vector_type: VectorType = setting("vector", "vector_type", choices=get_args(VectorType))
    hnsw_m: int = setting(16, "hnsw_m", lo=2, hi=100)
    hnsw_ef_construction: int = setting(64, "hnsw_ef_construction", lo=4, hi=1000)
    min_rows: int = setting(5000, "index_min_rows", lo=0, hi=10**12)  # below this, exact search; no HNSW index
    memory: str = setting("256MB", "index_memory")  # maintenance_work_mem for the index build's own session
    workers: int = setting(1, "index_workers", lo=0, hi=64)  # max_parallel_maintenance_workers (0: the leader)


FUSIONS = ("rrf", "convex", "zscore")  # how the two legs are fused (retrieve/fusion.py)


@dataclass(frozen=True)
class SearchSettings:
    # the PostgreSQL text search configuration of a document whose language is not detected surely (ragvps/langs.py);
    # with detect_language off, of every document (an override)
    language: str = setting("english", "language")
    detect_language: bool = setting(True, "detect_language")
    ef_search: int = setting(100, "ef_search", lo=1, hi=1000)
    candidates: int = setting(40, "candidates", lo=1, hi=10_000)
    keyword_budget: int = setting(300, "keyword_budget", lo=1, hi=10_000_000)  # BM25 from the rarest words' chunks
    bit_rerank_depth: int = setting(200, "bit_rerank_depth", lo=1, hi=1000)  # vector_type bit: re-ranked candidates
    top_k: int = setting(8, "top_k", lo=1, hi="max_k")
    rrf_k: int = setting(60, "rrf_k", lo=0, hi=10_000)
    # zscore: by standard score (the default: issue 52, bench/RESULTS.md); rrf: by rank; convex: by min-max score
    fusion: str = setting("zscore", "fusion", choices=FUSIONS)
    vector_weight: float = setting(
        1.0,
        "vector_weight",
        lo=0,
        hi=100,  # the keyword leg's weight is 1
        aliases=("rrf_vector_weight",),
    )


@dataclass(frozen=True)
class RerankSettings:
    kind: str = setting("none", "reranker", choices=tuple(backends.RERANKERS))
    url: str = setting("", "reranker_url")
    model: str = setting("", "reranker_model")
    api_key: str = setting("", "reranker_api_key", secret=True)
    candidates: int = setting(40, "rerank_candidates", lo=1, hi=1000)
    timeout: int = setting(30, "reranker_timeout", lo=1, hi=3600)

    @property
    def backend(self) -> backends.Backend:
        return backends.RERANKERS[self.kind]


@dataclass(frozen=True)
class GenerateSettings:
    kind: str = setting("extractive", "generator", choices=tuple(backends.GENERATORS))
    url: str = setting("", "generator_url")
    model: str = setting("", "generator_model")
    api_key: str = setting("", "generator_api_key", secret=True)
    temperature: float = setting(0.0, "temperature", lo=0, hi=2)
    timeout: int = setting(120, "generator_timeout", lo=1, hi=3600)
    retries: int = setting(3, "generator_retries", lo=0, hi=20)
    answer_reserve: int = setting(512, "answer_reserve", lo=16, hi=1_000_000)  # kept free of the context window
    context_window: int = setting(0, "context_window", lo=0, hi=10_000_000)  # 0: the model's (8,192 when unknown)
    token_encoding: str = setting("", "token_encoding", choices=("", "cl100k_base", "o200k_base"))  # "": by model
    answer_chunks: int = setting(8, "answer_chunks", lo=1, hi=1000)
    min_evidence: float = setting(0.40, "answer_min_evidence", lo=0, hi=1, aliases=("answer_min_score",))
    cache: bool = setting(True, "answer_cache")

    @property
    def backend(self) -> backends.Backend:
        return backends.GENERATORS[self.kind]


@dataclass(frozen=True)
class ServeSettings:
    host: str = setting("127.0.0.1", "host")
    port: int = setting(8765, "port", lo=0, hi=65535)
    api_keys: tuple[str, ...] = setting((), "api_keys", secret=True)
    api_key_file: str = setting("", "api_key_file")
    cors_origins: tuple[str, ...] = setting((), "cors_origins")
    allowed_hosts: tuple[str, ...] = setting((), "allowed_hosts")  # Host names beyond loopback's (a proxy's)
    max_body_bytes: int = setting(65536, "max_body_bytes", lo=1024, hi=1 << 30)
    request_timeout: int = setting(120, "request_timeout", lo=1, hi=86_400)
    header_timeout: int = setting(5, "header_timeout", lo=1, hi=3600)  # seconds a request's headers may take
    max_k: int = setting(100, "max_k", lo=1, hi=10_000)  # the most chunks one search or question may ask for
    # POST /kb/{name}/documents: one upload's bytes (all its files), one file's bytes, files in one upload
    upload_max_bytes: int = setting(1 << 30, "upload_max_bytes", lo=1024, hi=1 << 40)
    upload_max_file_bytes: int = setting(256 << 20, "upload_max_file_bytes", lo=1024, hi=1 << 40)
    upload_max_files: int = setting(1000, "upload_max_files", lo=1, hi=100_000)
    upload_max_json_bytes: int = setting(16 << 20, "upload_max_json_bytes", lo=1024, hi=1 << 40)  # parsed in memory
    log_format: str = setting("text", "log_format", choices=("text", "json", "off"))  # the request log's lines
    metrics: bool = setting(True, "metrics")  # GET /metrics, and the use cases observed for it
    log_questions: bool = setting(False, "log_questions")  # the question's text in the request log (off: never)


@dataclass(frozen=True)
class SourceSettings:
    """What connected sources may use of the server (docs/security.md, "Sources"): set only in the server's
    configuration, never by a knowledge base."""

    # hosts, addresses and networks (CIDR) beyond the public internet that sources may connect to
    allow_hosts: tuple[str, ...] = setting((), "source_allow_hosts")
    # the server's table of named S3 credentials (an INI file: [name] aws_access_key_id, aws_secret_access_key,
    # aws_session_token, knowledge_bases = kb, kb or *); a source names one with its option `profile`
    credentials_file: str = setting("", "source_credentials_file")
    # `kb/source` (or `kb/*`, `*`) whose S3 sources may sign with the server's own AWS_* environment or shared
    # credentials file; none by default
    ambient_credentials: tuple[str, ...] = setting((), "source_ambient_credentials")


@dataclass(frozen=True)
class AuthSettings:
    """People besides keys (docs/auth.md): OpenID Connect sign-in, a reverse proxy's user headers, a chat front end
    that forwards its user, the roles their groups map to, and the audit log."""

    oidc_issuer: str = setting("", "oidc_issuer")  # empty: no sign-in; else the provider's issuer URL (discovery)
    oidc_client_id: str = setting("", "oidc_client_id")
    oidc_client_secret: str = setting("", "oidc_client_secret", secret=True)  # empty: a public client (PKCE alone)
    oidc_scopes: tuple[str, ...] = setting(("openid", "profile", "email"), "oidc_scopes")
    oidc_groups_claim: str = setting("groups", "oidc_groups_claim")  # the claim that lists the user's groups
    oidc_audience: tuple[str, ...] = setting((), "oidc_audience")  # bearer tokens' `aud` besides the client id
    oidc_leeway: int = setting(60, "oidc_leeway", lo=0, hi=3600)  # seconds of clock skew allowed on exp/nbf/iat
    oidc_redirect_url: str = setting("", "oidc_redirect_url")  # the public URL of /auth/callback (behind a proxy)
    session_secret: str = setting("", "session_secret", secret=True)  # empty: a random key kept in data_dir
    session_hours: int = setting(8, "session_hours", lo=1, hi=24 * 90)  # a sign-in lasts at most this long
    # "group=kb:role" each (kb `*`: every knowledge base); a user holds the best role any of their groups gives
    group_roles: tuple[str, ...] = setting((), "group_roles")
    trusted_proxies: tuple[str, ...] = setting((), "trusted_proxies")  # addresses/CIDRs whose user headers count
    proxy_user_header: str = setting("Remote-User", "proxy_user_header")
    proxy_groups_header: str = setting("Remote-Groups", "proxy_groups_header")  # comma-separated groups
    proxy_email_header: str = setting("Remote-Email", "proxy_email_header")
    forward_user_keys: tuple[str, ...] = setting((), "forward_user_keys")  # key names that may speak for users
    audit_days: int = setting(90, "audit_days", lo=1, hi=3650)  # the audit log keeps this many days

    @property
    def oidc(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_client_id)

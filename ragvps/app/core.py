"""The App: one per process, it owns the settings, the embedder and the connections. Every interface (the CLI, the
HTTP API, MCP) opens one App and calls one method per use case; a method returns a report dataclass and prints nothing.

    with App.open(settings) as app:                    # pooled=True in a long-running server
        result = app.search(SearchRequest("how do I rotate the keys?"))
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ragvps.app.kbs import resolve
from ragvps.app.observe import QUIET, Observer
from ragvps.app.requests import Answer, AskRequest, Health, PromptPreview, SearchRequest, SearchResult
from ragvps.app.search import search
from ragvps.config import Settings
from ragvps.db import index, store
from ragvps.db.catalog import bind
from ragvps.db.connections import PooledConnections, SingleConnection
from ragvps.db.database import driver_errors
from ragvps.embed import embed_queries
from ragvps.embed.models import spec_for
from ragvps.embed.registry import make_embedder, make_lanes, resolve_spec
from ragvps.errors import UsageError
from ragvps.generate import cache as answer_cache
from ragvps.retrieve.search import bit_depth

if TYPE_CHECKING:
    import psycopg
    from numpy.typing import NDArray

    from ragvps.app.calibration import Calibration, Gold
    from ragvps.app.ports import OnSources, OnToken
    from ragvps.app.requests import ChatAnswer, ChatRequest
    from ragvps.db.catalog import KnowledgeBase
    from ragvps.db.connections import Connections
    from ragvps.db.replicated import Reader
    from ragvps.db.store import EmbeddingSet
    from ragvps.embed import Embedder
    from ragvps.embed.hosts import Lanes
    from ragvps.generate.registry import Generator
    from ragvps.ingest.chunking import IngestReport
    from ragvps.ingest.reindex import ReindexReport
    from ragvps.ingest.worker import WorkReport
    from ragvps.measure.doctor import Diagnosis
    from ragvps.measure.evaluate import EvalReport, Question
    from ragvps.measure.inspect import IndexCheck, StatsReport
    from ragvps.measure.summary import PlanMeasurement
    from ragvps.records import ModelSpec

T = TypeVar("T")
Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]


def _quiet(*_: object) -> None: ...


class App:
    """Settings, one lazily loaded embedder and a connection source; one method per use case."""

    def __init__(self, settings: Settings, connections: Connections, kb: KnowledgeBase | None = None):
        self.settings = settings
        self.configured: Settings | None = None  # kbs.kept_model kept an older model: what reindex sets
        self.kb = kb  # None: no knowledge base bound (commands that need no database: chunk, plan)
        self.observer: Observer = QUIET  # told of each search and answer (a server's metrics and request log)
        self._connections = connections
        self._embedder: Embedder | None = None
        self._generator: Generator | None = None
        self._spec: ModelSpec | None = None
        self._lock = threading.Lock()
        # A search found the active set matching the model: later ones check it only inside their own transaction
        # (app/search.py), not once more before embedding the question.
        self.set_matched = False

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, *, pooled: bool = False, database: bool = True) -> Iterator[App]:
        """An App for this process, bound to the knowledge base `settings.database.kb` (its own settings over
        the global ones): one connection or, pooled, a ready pool. `database=False`: nothing is opened."""
        connections: Connections = PooledConnections(settings) if pooled else SingleConnection(settings)
        app = cls.bound(settings, connections) if database else cls(settings, connections)
        try:
            yield app
        finally:
            app.close_generator()
            connections.close()

    @classmethod
    def bound(cls, settings: Settings, connections: Connections) -> App:
        """An App for one knowledge base over shared connections (a server keeps one per knowledge base)."""
        kb, kept, configured = resolve(settings, connections)
        app = cls(kept, connections, kb)
        app.configured = configured
        return app

    @property
    def kb_name(self) -> str:
        return self.kb.name if self.kb is not None else self.settings.database.kb

    @property
    def connections(self) -> Connections:
        return self._connections

    def close_generator(self) -> None:
        if self._generator is not None and hasattr(self._generator, "close"):
            self._generator.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection; one that dies under the caller (a stopped server) becomes one clear DatabaseError."""
        with driver_errors(self.settings), self._connections.connection() as conn:
            if self.kb is not None:
                bind(conn, self.kb.schema)
            yield conn

    def read(self, work: Callable[[Reader], T]) -> T:
        """`work` on a replica that has seen this knowledge base's writes, else on the primary (db/replicated.py)."""
        with driver_errors(self.settings):
            return self._connections.read(work, self.kb.schema if self.kb is not None else None)

    @property
    def spec(self) -> ModelSpec:
        """The configured embedding model's facts, without loading it."""
        if self._spec is None:
            self._spec = resolve_spec(self.settings)  # Ollama is asked only about a model ragvps has no entry for
        return self._spec

    @property
    def embedder(self) -> Embedder:
        """The embedder, loaded on first use and then shared (the ONNX model loads once per process)."""
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.settings, self.spec)
            return self._embedder

    # --- ingest --------------------------------------------------------------------------------------

    def ingest(self, path: Path | str, progress: Progress = _quiet, warn: Warn = _quiet) -> IngestReport:
        """Bring the database in line with one folder; only what changed is chunked, embedded, stored."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.app.chunking import existing_path
        from ragvps.ingest.pipeline import ingest

        path = existing_path(path)
        with self.connection() as conn:
            report = ingest(conn, self.settings, path, self.spec, self._lanes(progress, warn), progress, warn)
            report.answers_pruned = _prune_answers(conn, [report])
            return report

    def watch(
        self,
        path: Path | str,
        on_report: Callable[[IngestReport, int], None],
        *,
        stop: threading.Event | None = None,
        progress: Progress = _quiet,
        warn: Warn = _quiet,
        debounce_ms: int | None = None,
    ) -> int:
        """Ingest a folder, then again after each batch of changes in it, until `stop` is set (or Ctrl-C)."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.app.chunking import existing_path
        from ragvps.ingest.watch import DEBOUNCE_MS, watch

        root = existing_path(path)
        return watch(
            root,
            lambda: self.ingest(root, progress, warn),
            on_report,
            stop,
            DEBOUNCE_MS if debounce_ms is None else debounce_ms,
        )

    def reindex(self, progress: Progress = _quiet, warn: Warn = _quiet) -> ReindexReport:
        """Switch models if the configured one differs, re-sync every ingested folder, rebuild the index."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.ingest.reindex import reindex

        if self.configured is not None:  # the model this knowledge base kept gives way to the configured one
            return App(self.configured, self._connections, self.kb).reindex(progress, warn)
        with self.connection() as conn:
            report = reindex(conn, self.settings, self.spec, self._lanes(progress, warn), progress, warn)
            _prune_answers(conn, list(report.roots.values()))
            return report

    def work(
        self,
        *,
        name: str | None = None,
        exit_when_empty: bool = False,
        stop: threading.Event | None = None,
        progress: Progress = _quiet,
        warn: Warn = _quiet,
    ) -> WorkReport:
        """Embed queued chunks (from an ingest with defer_embedding) until `stop` is set, or until the queue
        is empty with exit_when_empty; the model must be the one the queue fills vectors for."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.ingest.worker import work

        return work(
            self.connection,
            self.settings,
            self.spec,
            lambda: self.embedder,
            name=name,
            exit_when_empty=exit_when_empty,
            stop=stop,
            progress=progress,
            warn=warn,
        )

    def _lanes(self, progress: Progress, warn: Warn) -> Callable[[], Lanes]:
        return lambda: make_lanes(self.settings, self.spec, lambda: self.embedder, progress, warn)

    # --- search --------------------------------------------------------------------------------------

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = embed_queries(self.embedder, [text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str], progress: Progress = _quiet) -> NDArray[np.float32]:
        """All questions embedded up front, in batches."""
        size = max(self.settings.embed.batch_size, 64)
        out = []
        for lo in range(0, len(texts), size):
            out.append(embed_queries(self.embedder, texts[lo : lo + size]))
            progress("embed", min(lo + size, len(texts)), len(texts))
        return np.concatenate(out) if out else np.zeros((0, self.spec.dims), dtype=np.float32)

    def search(self, request: SearchRequest) -> SearchResult:
        """The top chunks for a query: the active embedding set is read and searched in one transaction."""
        return search(self, request)

    # --- answer --------------------------------------------------------------------------------------

    @property
    def generator(self) -> Generator:
        """The configured generator (extractive, openai, anthropic, ollama), made once and shared."""
        with self._lock:
            if self._generator is None:
                from ragvps.generate.registry import make_generator  # lazy: as ask's, above

                self._generator = make_generator(self.settings, lambda: self.embedder)
            return self._generator

    def ask(self, request: AskRequest, on_sources: OnSources | None = None, on_token: OnToken | None = None) -> Answer:
        """An answer with citations; `on_sources` once before generation, `on_token` per streamed piece.
        Either callback may raise to cancel: the upstream request is closed and nothing is cached."""
        # lazy: the answering use cases load for the commands that answer (`kb list`, `stats`, `ingest` start-up)
        from ragvps.app.ask import ask

        answer = ask(self, request, on_sources, on_token)
        self.observer.answered(self.kb_name, answer)
        return answer

    def chat(
        self, request: ChatRequest, on_sources: OnSources | None = None, on_token: OnToken | None = None
    ) -> ChatAnswer:
        """The answer to a conversation's last question, retrieved for it made standalone; callbacks as `ask`."""
        # lazy: the answering use cases load for the commands that answer (`kb list`, `stats`, `ingest` start-up)
        from ragvps.app.chat import chat

        self.observer.used(self.kb_name)  # a task or a closing searches nothing, and is still this base's
        return chat(self, request, on_sources, on_token)

    def build_prompt(self, request: AskRequest) -> PromptPreview:
        """The exact prompt `ask` would send, its token count and what was left out; nothing is sent."""
        # lazy: the answering use cases load for the commands that answer (`kb list`, `stats`, `ingest` start-up)
        from ragvps.app.ask import build_prompt

        return build_prompt(self, request)

    def active_set(self, conn: psycopg.Connection, action: str) -> EmbeddingSet:
        """The embedding set queries use, checked against the configured model (the vector type may differ:
        the query vector is the same, so a query searches whichever type is active)."""
        eset = store.active_set(conn)
        if eset is None:
            raise UsageError("nothing is ingested yet: run `ragvps ingest PATH` first")
        store.check_model(eset, self.spec, eset.vector_type, action)
        return eset

    # --- measure -------------------------------------------------------------------------------------

    def evaluate(
        self,
        questions: Sequence[Question],
        source: str,
        modes: Sequence[str],
        k: int,
        depth: int,
        progress: Progress = _quiet,
        warn: Warn = _quiet,
    ) -> EvalReport:
        """Recall, MRR and nDCG of each search mode over gold questions."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.measure import evaluate

        warnings: list[str] = []

        def record(message: str) -> None:
            warnings.append(message)
            warn(message)

        settings = self.settings
        if depth > settings.search.candidates:  # each leg must return enough chunks for the curve
            settings = settings.replace(candidates=depth)
        with self.connection() as conn:
            eset = self.active_set(conn, "evaluate")
            missing = evaluate.missing_documents(questions, evaluate.known_documents(conn, questions))
            if missing:
                record(
                    f"{len(missing)} gold documents are not ingested (e.g. {missing[0]!r}): their questions "
                    "count as misses; `doc` is a path relative to the ingested folder (or a BEIR _id)"
                )
            conn.commit()
            embeddings = (
                self.embed_queries([q.text for q in questions], progress)
                if any(m != "keyword" for m in modes)
                else None
            )
            ranked = evaluate.retrieve(conn, eset, questions, embeddings, settings, modes, depth, progress)
        result = evaluate.score(questions, ranked, k, depth)
        result.warnings, result.source = warnings, source
        return result

    def check_index(
        self,
        questions: Sequence[Question] | None,
        sample: int,
        k: int,
        target: float,
        progress: Progress = _quiet,
        source: str = "questions",
    ) -> IndexCheck:
        """How much of the exact top-k the HNSW index finds; with no index, the exact search says so."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.measure import inspect

        current = max(self.settings.search.ef_search, self.settings.search.candidates)  # what queries set
        with self.connection() as conn:
            eset = self.active_set(conn, "check the index")
            current = bit_depth(self.settings) if eset.vector_type == "bit" else current
            if not index.index_exists(conn, eset):
                return inspect.exact_only(
                    eset, store.chunk_count(conn), self.settings.index.min_rows, k, current, target
                )
            if questions is not None:  # sampled here as the chunks are, the same sample each run
                questions = inspect.sample_questions(questions, sample)
                vectors = self.embed_queries([q.text for q in questions], progress)
                exclude: list[int | None] = [None] * len(questions)
            else:
                vectors, sampled = inspect.sample_vectors(conn, eset, sample)
                exclude = list(sampled)
                source = "chunks"
            conn.commit()
            return inspect.check_index(conn, eset, vectors, exclude, k, current, target, source)

    def stats(self) -> StatsReport:
        """Rows and sizes of the index beside the machine's memory, the refusal line in force, what to act on."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.app.calibration import fusion_in_force, refusal_line
        from ragvps.measure import inspect

        with self.connection() as conn:
            report = inspect.stats(conn, self.active_set(conn, "show stats"), self.settings)
        return dataclasses.replace(report, refusal=refusal_line(self), fusion=fusion_in_force(self))

    def calibrate(
        self,
        n: int = 200,
        target: float = 0.90,
        apply: bool = False,
        progress: Progress = _quiet,
        gold: Gold | None = None,
    ) -> Calibration:
        """The refusal line and the fusion fitted on this knowledge base's own questions (or on `gold`'s as the
        answerable ones); kept with `apply`."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.app.calibration import calibrate

        return calibrate(self, n, target, apply, progress, gold)

    def health(self) -> Health:
        """Is the database reachable, is anything in, which model is active, is the pool stuck: what a server's
        /health says. On its own connection with short timeouts (app/health.py), never waiting on the pool."""
        # lazy: the answering use cases load for the commands that answer (`kb list`, `stats`, `ingest` start-up)
        from ragvps.app.health import health

        return health(self.settings, self._connections, self.kb.schema if self.kb else None)

    def doctor(self) -> Diagnosis:
        """Ask the embedder about its model, embed one text, compare with the index."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.measure.doctor import diagnose

        def active() -> EmbeddingSet | None:
            with self.connection() as conn:
                return store.active_set(conn)

        return diagnose(self.settings, active)

    def plan_measure(
        self,
        path: Path | str,
        spec: ModelSpec | None,
        overlap: str | None,
        dims: int | None,
        bytes_per_dim: int,
        warn: Warn = _quiet,
    ) -> PlanMeasurement:
        """`ragvps plan --path`: real token counts and the real chunker over a folder; `overlap` may be a
        percentage of the chunk size that ingest would use. A plan asks no server: the model is one ragvps knows."""
        # lazy: ingest and measure stages load for their own commands (`query` start-up)
        from ragvps.app.chunking import existing_path
        from ragvps.ingest.chunking import chunker_config
        from ragvps.measure.summary import plan_measure
        from ragvps.measure.windows import parse_overlap

        spec = spec or spec_for(self.settings)
        settings = self.settings
        if overlap is not None:
            settings = settings.replace(chunk_overlap=parse_overlap(overlap, chunker_config(settings, spec).size))
        return plan_measure(settings, spec, existing_path(path), dims, bytes_per_dim, warn)


def _prune_answers(conn: psycopg.Connection, reports: Sequence[IngestReport]) -> int:
    """Cached answers whose chunks an ingest changed or deleted are dropped (they never match a key anyway)."""
    return answer_cache.prune(conn) if any(r.stored or r.deleted for r in reports) else 0

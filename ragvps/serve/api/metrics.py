"""/metrics in the Prometheus text format (prometheus-client), and what feeds it.

`Metrics` is the server's Observer (ragvps.app.observe): every search and answer of every interface (HTTP, the
OpenAI and Ollama routes, MCP) reports its stage timings, outcome, evidence and tokens as it ends. The request
middleware (serve/gate/request_log.py) counts requests by route template and status. What the database holds
(pool, reachability, each knowledge base's index against shared_buffers, its embedding queue) is read at each
scrape, on the health check's side connection.

Labels stay bounded: route templates (never a raw path), knowledge-base names, stage names and outcomes from
fixed lists, never a question, a key or a path parameter. The registry is the server's own (not the process's
global one), made when the server is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ragvps.app.health import scrape
from ragvps.app.observe import ANSWER_STAGES, STAGES, outcome
from ragvps.serve.gate.request_log import current

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ragvps.app.health import ReplicaReport
    from ragvps.app.requests import Answer, SearchResult
    from ragvps.serve.shared.lifecycle import Ready

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EVIDENCE_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
TOKEN_KINDS = ("prompt", "completion", "cached")


class Metrics:
    """The server's metrics: an Observer of the use cases and a source of request counts."""

    def __init__(self, ready: Ready) -> None:
        disable_created_metrics()  # no `_created` series beside every counter: a scrape half the size
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ragvps_http_requests",
            "HTTP requests, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "ragvps_http_request_duration_seconds",
            "HTTP request duration, to the last byte.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.stages = Histogram(
            "ragvps_stage_duration_seconds",
            "Time in each stage of a search or an answer.",
            ["kb", "stage"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        )
        self.searches = Counter(
            "ragvps_searches", "Searches, by knowledge base and mode.", ["kb", "mode"], registry=registry
        )
        self.legs = Counter(
            "ragvps_search_legs",
            "Hybrid searches by how their legs ran: parallel (two pool "
            "connections), fallback (no idle connection: one after the other).",
            ["kb", "how"],
            registry=registry,
        )
        self.zero_hits = Counter("ragvps_search_zero_hits", "Searches that found nothing.", ["kb"], registry=registry)
        self.answers = Counter(
            "ragvps_answers",
            "Answers, by outcome: answered (a model), extractive, refused_gate "
            "(no source passed answer_min_evidence), refused_model, cached.",
            ["kb", "outcome"],
            registry=registry,
        )
        self.evidence = Histogram(
            "ragvps_answer_evidence",
            "The best retrieved chunk's evidence (0..1) per answer.",
            ["kb"],
            buckets=EVIDENCE_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "ragvps_llm_tokens",
            "LLM tokens: prompt, completion, and prompt tokens the provider read from its own cache (cached).",
            ["kb", "kind"],
            registry=registry,
        )
        registry.register(_DatabaseCollector(ready))

    # --- the Observer --------------------------------------------------------------------------------

    def searched(self, kb: str, result: SearchResult) -> None:
        self.searches.labels(kb, result.mode).inc()
        if result.legs:
            self.legs.labels(kb, result.legs).inc()
        if not result.hits:
            self.zero_hits.labels(kb).inc()
        self._stages(kb, result.timings)
        record = current()
        if record is not None:
            record.searched(kb, result)

    def answered(self, kb: str, answer: Answer) -> None:
        ended = outcome(answer)
        self.answers.labels(kb, ended).inc()
        self.evidence.labels(kb).observe(answer.evidence)
        self._stages(kb, {k: v for k, v in answer.timings.items() if k in ANSWER_STAGES})
        for kind, n in zip(
            TOKEN_KINDS,
            (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.cached_tokens),
            strict=True,
        ):
            if n:
                self.tokens.labels(kb, kind).inc(n)
        record = current()
        if record is not None:
            record.answered(kb, answer, ended)

    def used(self, kb: str) -> None:
        """A request that worked in `kb` without a search (a chat client's title, a closing): its audit row names it."""
        record = current()
        if record is not None:
            record.used(kb)

    def _stages(self, kb: str, timings: Mapping[str, float]) -> None:
        for key, ms in timings.items():
            stage = STAGES.get(key)
            if stage is not None:
                self.stages.labels(kb, stage).observe(ms / 1000)

    # --- requests ------------------------------------------------------------------------------------

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def exposition(self) -> bytes:
        """The text format of every metric now (reads the database: call it off the event loop)."""
        return generate_latest(self.registry)


class _DatabaseCollector:
    """Read at each scrape: the database reachable, the pool, each knowledge base's index and queue."""

    def __init__(self, ready: Ready) -> None:
        self.ready = ready

    def describe(self) -> list[Metric]:
        return []  # the families depend on the database: not checked at registration

    def collect(self) -> Iterator[Metric]:
        library = self.ready.library
        up = GaugeMetricFamily("ragvps_database_up", "1 when PostgreSQL answered the scrape's query.")
        if library is None:
            up.add_metric([], 0)
            yield up
            return
        found = scrape(self.ready.settings, library.connections)
        up.add_metric([], int(found.database))
        yield up
        if found.pool is not None:
            for name, value, help_ in (
                ("size", found.pool.size, "Connections the pool may hold (pool_size)."),
                ("busy", found.pool.busy, "Pool connections in use."),
                ("waiting", found.pool.waiting, "Requests waiting for a pool connection."),
            ):
                gauge = GaugeMetricFamily(f"ragvps_pool_{name}", help_)
                gauge.add_metric([], value)
                yield gauge
        yield from _replica_metrics(library.connections.replicas())
        if not found.database:
            return
        index = GaugeMetricFamily("ragvps_index_bytes", "The knowledge base's vector index (HNSW) size.", labels=["kb"])
        queued = GaugeMetricFamily("ragvps_embed_queue_chunks", "Chunks waiting in the embedding queue.", labels=["kb"])
        jobs = GaugeMetricFamily("ragvps_ingest_jobs_open", "Upload jobs queued or running.", labels=["kb"])
        embedded = CounterMetricFamily(
            "ragvps_ingest_job_chunks_embedded",
            "Chunks the upload jobs have embedded (kept with their jobs).",
            labels=["kb"],
        )
        failed = CounterMetricFamily(
            "ragvps_ingest_job_files_failed", "Uploaded files a job could not store.", labels=["kb"]
        )
        for kb in found.kbs:
            index.add_metric([kb.name], kb.index_bytes)
            queued.add_metric([kb.name], kb.queued)
            jobs.add_metric([kb.name], kb.open_jobs)
            embedded.add_metric([kb.name], kb.job_chunks)
            failed.add_metric([kb.name], kb.failed_files)
        buffers = GaugeMetricFamily(
            "ragvps_shared_buffers_bytes",
            "PostgreSQL's shared_buffers: an index larger than this is read from disk on cold searches.",
        )
        buffers.add_metric([], found.shared_buffers)
        yield from (index, queued, jobs, embedded, failed, buffers)


def _replica_metrics(report: ReplicaReport | None) -> Iterator[Metric]:
    """Each read replica's lag and state, the primary's reachability as the replicas' watcher sees it, reads by
    where they ran, and the writes kept for the primary while it was away (setting database_replica_urls)."""
    if report is None:
        return
    lag = GaugeMetricFamily(
        "ragvps_replica_lag_seconds",
        "How long the primary has held WAL the replica has not replayed.",
        labels=["replica"],
    )
    state = GaugeMetricFamily(
        "ragvps_replica_state", "2 ok (read from), 1 lagging past replica_max_lag, 0 down.", labels=["replica"]
    )
    for r in report.replicas:
        state.add_metric([r.name], {"ok": 2, "lagging": 1, "down": 0}[r.state])
        if r.lag_s is not None:
            lag.add_metric([r.name], r.lag_s)
    primary = GaugeMetricFamily("ragvps_primary_up", "1 when the primary answers the replicas' watcher.")
    primary.add_metric([], int(report.primary_problem is None))
    reads = CounterMetricFamily(
        "ragvps_replica_reads", "Reads (searches, asks) by the server that ran them.", labels=["on"]
    )
    for on, count in sorted(report.reads.items()):
        reads.add_metric([on], count)
    kept = GaugeMetricFamily("ragvps_deferred_writes", "Answer-memo writes kept for the primary while it is away.")
    kept.add_metric([], report.deferred)
    done = CounterMetricFamily(
        "ragvps_deferred_writes_done", "Writes kept for the primary, by outcome.", labels=["outcome"]
    )
    done.add_metric(["written"], report.deferred_written)
    done.add_metric(["dropped"], report.deferred_dropped)
    yield from (lag, state, primary, reads, kept, done)

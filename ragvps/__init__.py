"""ragvps: a self-hosted RAG pipeline for a CPU-only VPS."""

__version__ = "0.1.0"

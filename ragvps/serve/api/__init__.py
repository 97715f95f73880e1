"""ragvps's own HTTP API: /search, /ask, /stats, /health, /kb/{name}/..., /metrics and the page at /."""

"""Ollama's API, emulated under /api: /api/version, /api/tags, /api/show, /api/chat."""

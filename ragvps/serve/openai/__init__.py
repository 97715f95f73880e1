"""The OpenAI-compatible API under /v1: /v1/models and /v1/chat/completions."""

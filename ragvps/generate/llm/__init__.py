"""One small httpx client per LLM provider; `base` holds what they share."""

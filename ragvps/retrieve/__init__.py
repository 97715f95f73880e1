"""Retrieval: the vector and BM25 legs, filters, and reciprocal rank fusion."""

"""Ingest: read sources, chunk them, keep stage files on disk, and run the staged pipeline."""

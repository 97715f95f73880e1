"""Measurement: plan arithmetic, evaluation, metrics, reports, index checks, sizes and the doctor."""

"""Retrieval-quality evaluations of recall on public conversation benchmarks."""

"""Benchmarks of whos_online: ``python3 scripts/dev.py bench`` runs them all (``python -m bench``).

Every figure is measured against a baseline taken in the same run, with the variants interleaved,
because the machines this runs on are shared and noisy: absolute times drift between runs, ratios
carry over. Nothing here is imported by the package or the tests.
"""

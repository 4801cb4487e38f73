"""Embedding and rerank providers behind one small seam (see `base.py`).

Its face: base (the seam), registry (providers by name), prefixes and batching.
"""

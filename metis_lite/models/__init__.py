"""Embedding and rerank providers behind one small seam (see `base.py`)."""

"""The Python API: a base opened, indexed and searched (`metis_lite.Base`), and several
searched as one (`metis_lite.search_bases`).

    core.py      Base: a base file opened, its sources, its runs, its searches
    guards.py    what a caller asks a Base before calling: damaged, read-only, writable
    models.py    a Base's embedding model and reranker, made when first needed; its searches counted
    status.py    a Base's status: languages, chunks waiting for vectors, its warnings
    sources.py   a source as add_source takes it: its path checked, its name chosen
    multi.py     search_bases: several Bases' snapshots handed to one search (retrieval/search.py)
    passages.py  passages by address (a document's chunks, its neighbours), for agents

Its face: core, multi and passages.
"""

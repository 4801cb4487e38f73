"""An indexing run: a base's sources read, parsed, chunked, written and embedded.

ingest.py      the run: its sources walked, its documents added, changed or removed, its
               report (IndexReport); the entry point of a run
walk.py        a source's files listed (hidden files skipped), each with its kind
changed.py     a source listed by the paths a watch batch names, not walked
ignore.py      what a folder leaves out: its ignore files and --exclude patterns, as git reads them
parse_pool.py  the worker processes that parse and chunk files' bytes on every core
workers.py     how many of them a run starts, by what its changed files cost to parse
ocr_run.py     the run's OCR: each source's languages, and the scanned pages it could not read
ocr_pages.py   the pages OCR reads, from the parse workers to the run's progress
site_titles.py the title suffix a source's HTML pages share, cut from their titles
pipeline.py    the run's writing: documents written as they are parsed, vectors alongside
watch.py       a base that follows its sources: their file-system events, batched, each batch a run

Its face: ingest, watch.
"""

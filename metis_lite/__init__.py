"""metis-lite: hybrid search in which each base is one SQLite file.

    from metis_lite import Base, Filters

    with Base.open("handbook.db", create=True) as base:
        base.add_source("examples/handbook")
        base.index()
        answer = base.search("how many holidays do I get", filters=Filters(kinds=("md",)))

The names below are the public surface; the modules behind them may move. They are imported
when first used (PEP 562), so `import metis_lite` — and the CLI's `-h` — stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Answer": "metis_lite.records",
    "Base": "metis_lite.base",
    "BaseStatus": "metis_lite.base",
    "Citation": "metis_lite.records",
    "Fact": "metis_lite.records",
    "Filters": "metis_lite.records",
    "IndexReport": "metis_lite.ingest",
    "MetisError": "metis_lite.errors",
    "MultiAnswer": "metis_lite.multi",
    "Result": "metis_lite.records",
    "Scores": "metis_lite.records",
    "SourceInfo": "metis_lite.records",
    "search_bases": "metis_lite.multi",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'metis_lite' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""metis-lite: hybrid search in which each base is one SQLite file.

    from metis_lite import Base, Filters

    with Base.open("handbook.db", create=True) as base:
        base.add_source("examples/handbook")
        base.index()
        answer = base.search("how many holidays do I get", filters=Filters(kinds=("md",)))

The names below are the public surface; the modules behind them may move. They are imported
when first used (PEP 562), so `import metis_lite` — and the CLI's `-h` — stays cheap; a type
checker reads them from the imports under TYPE_CHECKING (the package ships `py.typed`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names' types, for type checkers (the package ships py.typed)
    from metis_lite.base.core import Base as Base
    from metis_lite.base.core import BaseStatus as BaseStatus
    from metis_lite.base.multi import MultiAnswer as MultiAnswer
    from metis_lite.base.multi import search_bases as search_bases
    from metis_lite.errors import MetisError as MetisError
    from metis_lite.indexing.ingest import IndexReport as IndexReport
    from metis_lite.models.base import Provider as Provider
    from metis_lite.records import Answer as Answer
    from metis_lite.records import Citation as Citation
    from metis_lite.records import Fact as Fact
    from metis_lite.records import Filters as Filters
    from metis_lite.records import Result as Result
    from metis_lite.records import Scores as Scores
    from metis_lite.records import SourceInfo as SourceInfo

__version__ = "0.1.0"

_EXPORTS = {
    "Answer": "metis_lite.records",
    "Base": "metis_lite.base.core",
    "BaseStatus": "metis_lite.base.core",
    "Citation": "metis_lite.records",
    "Fact": "metis_lite.records",
    "Filters": "metis_lite.records",
    "IndexReport": "metis_lite.indexing.ingest",
    "MetisError": "metis_lite.errors",
    "MultiAnswer": "metis_lite.base.multi",
    "Provider": "metis_lite.models.base",
    "Result": "metis_lite.records",
    "Scores": "metis_lite.records",
    "SourceInfo": "metis_lite.records",
    "search_bases": "metis_lite.base.multi",
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

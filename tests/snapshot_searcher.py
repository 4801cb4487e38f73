"""A second process that searches a base for a while (tests/test_snapshot.py): it prints, as
one JSON line, each search's start and end (time.monotonic, shared by every process on the
machine) and the (document, text) of each result, and every error it met. With `spec` as its
third argument it searches with the models the base's spec names, else with word_models'."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from word_models import attach  # noqa: E402

from metis_lite.base.core import Base  # noqa: E402


def main(path: str, seconds: float, models: str = "words") -> None:
    searches, errors = [], []
    opened = Base(path)
    with opened if models == "spec" else attach(opened) as base:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            mode = ("hybrid", "dense", "keyword")[n % 3]
            started = time.monotonic()
            try:
                answer = base.search(f"churn topic word{n % 40}", mode=mode, top_k=10)
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            finally:
                n += 1
            found = [(r.citation.document, r.text) for r in answer.results]
            searches.append((started, time.monotonic(), found))
    print(json.dumps({"searches": searches, "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), *sys.argv[3:])

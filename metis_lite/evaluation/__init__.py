"""Measure search quality: evaluation sets asked of a base in each mode, scored and compared.

    sets.py     evaluation files (JSON lines) → EvalSet
    beir.py     a BEIR folder → EvalSet, and its corpus written out as files to index
    bases.py    the base a BEIR collection is evaluated on (built, or reused)
    metrics.py  nDCG@k, recall@k, MRR@k over one question's ranking (pure)
    runner.py   ask every question in each mode; metrics, wins and losses, the console's why
    saved.py    evaluation sets and their runs' metrics saved inside a base
    report.py   a run's report as `eval --json` prints it, and as text

The command line is metis_lite/cli/eval.py (`metis-lite eval`); docs/eval.md says how to use it.

Its face: bases, beir, metrics, report, runner, saved, sets and why.
"""

from metis_lite.evaluation.runner import EvalReport, evaluate, parse_modes
from metis_lite.evaluation.sets import EvalSet, Expected, Question, read_jsonl

__all__ = ["EvalReport", "EvalSet", "Expected", "Question", "evaluate", "parse_modes", "read_jsonl"]

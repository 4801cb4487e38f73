"""Memories: facts that still hold come before facts a newer one replaced (spec, "Memories").

A fact is a note of the base's own notes source, named once when the base was made
(`metis-<its file name then>`, recorded in `meta`: a copy, another file name or a NAME=PATH
never make another): a document of kind `note` holding one chunk, embedded and indexed by words
like any other, plus a row of `facts` saying when it was stated, its optional subject and key,
and what replaced it. A newer fact with the same key replaces the one that held; a fact may also
name the facts it replaces. Nothing is deleted. A replaced fact's `replaced_at` is when the fact
that replaced it was stated.

A fact is written in one transaction that takes the base's write lock before it reads which
fact holds its key (Store.writing), so facts written at the same moment by several processes
all succeed, one after another, and one fact holds per key. A fact stated in the future (past
STATED_AT_FUTURE_TOLERANCE_S) is refused: it would hold its key against every later fact.
Times are written 'YYYY-MM-DDTHH:MM:SSZ' with a four-digit year (1000 to 9999), so that their
order as text is their order in time; an earlier year is refused.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from metis_lite.errors import InvalidRequest
from metis_lite.records import Chunk, Fact, Hit
from metis_lite.settings import HOLDING_WINDOW
from metis_lite.store import Store

NOTE_KIND = "note"
UNRELATED = 0.0
"""The fused score of a result unrelated to the question (fusion.py, `relative`: its cosine at
or below the base's mean, and no word of the question). Step 6 puts what holds first among the
results scored above it only."""
FACT_TEXT_MAX = 10_000
"""A fact longer than this is refused: a fact is a sentence or two, not a document."""

STATED_AT_FUTURE_TOLERANCE_S = 300
"""How far past this machine's clock a fact's stated_at may lie: clocks of the machines that
post facts differ by seconds, rarely minutes. Later than that is refused."""

YEAR_MIN = 1000
"""The earliest year a fact may be stated in: every time has four digits, so text order is
time order (a year 999 written '999-…' would sort after 2026)."""

INVISIBLE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"))
"""Unicode categories that show nothing: controls (NUL), formats (zero-width space), surrogates,
private use, unassigned, separators. Text made only of them is no fact, subject or key."""

MARKS = frozenset(("Mn", "Mc", "Me"))
"""Combining marks: drawn on the character before them, so text of marks alone shows no
character of its own (a lone U+0301, variation selectors, Mongolian free variation selectors)."""

BLANKS = frozenset((0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800))
"""Characters of visible categories that draw nothing: the Hangul fillers (letters that Unicode
marks Default_Ignorable_Code_Point) and the braille pattern blank (a symbol with no dot)."""

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def visible(text: str) -> bool:
    """True when the text holds at least one character a reader sees: not of an INVISIBLE
    category, not a combining mark (MARKS) and not one of the BLANKS."""
    return any(
        ord(c) not in BLANKS and unicodedata.category(c) not in INVISIBLE | MARKS for c in text
    )


def _written(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.strftime('%m-%dT%H:%M:%SZ')}"


def _latest_allowed() -> str:
    return _written(datetime.now(UTC) + timedelta(seconds=STATED_AT_FUTURE_TOLERANCE_S))


def parse_time(value: str | None, *, now: datetime | None = None) -> str:
    """An ISO 8601 time as UTC 'YYYY-MM-DDTHH:MM:SSZ' (now when None); InvalidRequest if bad,
    before the year 1000 (in UTC), or later than now by more than STATED_AT_FUTURE_TOLERANCE_S."""
    now = now or datetime.now(UTC)
    if value is None:
        return _written(now)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        moment = moment.astimezone(UTC)
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise InvalidRequest(f"stated_at must be an ISO 8601 date or time, not {value!r}") from None
    if moment.year < YEAR_MIN:
        raise InvalidRequest(
            f"stated_at {value!r} lies before the year {YEAR_MIN}: a fact's year is written "
            f"with four digits, {YEAR_MIN} to 9999"
        )
    if moment > now + timedelta(seconds=STATED_AT_FUTURE_TOLERANCE_S):
        raise InvalidRequest(
            f"stated_at {_written(moment)} is in the future (now is "
            f"{_written(now)}): a fact is stated when it is known"
        )
    return _written(moment)


_FACT_COLUMNS = "id, text, stated_at, subject, key, replaced_by, replaced_at"


def _fact(row: Sequence[object]) -> Fact:
    return Fact(*row)  # type: ignore[arg-type]


def add_fact(
    store: Store,
    *,
    text: str,
    stated_at: str | None = None,
    subject: str | None = None,
    key: str | None = None,
    replaces: Sequence[int] = (),
) -> Fact:
    """Add a fact in one transaction (its note, chunk, words and replacements), or nothing."""
    if not isinstance(text, str) or not visible(text):
        raise InvalidRequest(
            "a fact needs some text a reader can see (not only spaces or controls)"
        )
    if len(text) > FACT_TEXT_MAX:
        raise InvalidRequest(f"a fact holds at most {FACT_TEXT_MAX:,} characters")
    for name, value in (("subject", subject), ("key", key)):
        if value is not None and (not isinstance(value, str) or not visible(value)):
            raise InvalidRequest(f"{name} must be text a reader can see when given")
    if isinstance(replaces, str | bytes) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in replaces
    ):
        raise InvalidRequest("replaces must be a list of fact ids")
    text = text.strip()
    when = parse_time(stated_at)
    title = subject or "Fact"
    with store.writing():  # the write lock first: which fact holds the key cannot change
        source_id = store.add_source(store.notes_source(), None)
        missing = store.missing_facts(replaces)
        if missing:
            raise InvalidRequest(f"fact {missing[0]} does not exist in this base")
        holder = None
        if key is not None:
            rows = store.fact_rows("key = ? AND replaced_by IS NULL", (key,), columns=_FACT_COLUMNS)
            holder = _fact(rows[0]) if rows else None
        new_id = store.next_fact_id()
        born_replaced_by = None
        if holder is not None and when < holder.stated_at <= _latest_allowed():
            # An import of an older fact: the newer one still holds. (A holder stated in the
            # future, written before such dates were refused, does not pin its key.)
            born_replaced_by = holder.id
            if holder.id in replaces:
                raise InvalidRequest(
                    f"fact {holder.id} is newer with the same key, so it replaces this one; "
                    "this one cannot replace it too (a cycle)"
                )
        import hashlib  # a fact written needs it; a search does not (~3 ms of its start)

        document_id = store.replace_document(
            source_id=source_id,
            path=f"facts/{new_id}",
            kind=NOTE_KIND,
            title=title,
            content_hash=hashlib.sha256(text.encode()).hexdigest(),
            size=len(text.encode()),
            mtime=None,
            chunks=[Chunk(text=text, title=title, headings=())],
        )
        store.insert_fact(
            fact_id=new_id,
            document_id=document_id,
            text=text,
            stated_at=when,
            subject=subject,
            key=key,
            replaced_by=born_replaced_by,
            replaced_at=holder.stated_at if born_replaced_by and holder else None,
        )
        replaced = set(replaces)
        if holder is not None and born_replaced_by is None:
            replaced.add(holder.id)
        store.mark_replaced(sorted(replaced), by=new_id, at=when)
    return get_fact(store, new_id)


def get_fact(store: Store, fact_id: int) -> Fact:
    row = store.db.execute(f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
    if row is None:
        raise InvalidRequest(f"fact {fact_id} does not exist in this base")
    return _fact(row)


def list_facts(
    store: Store, *, offset: int = 0, limit: int = 50, holding: bool | None = None
) -> tuple[list[Fact], int]:
    """A page of facts, newest stated first, and how many there are in all."""
    for name, value, low, high in (("offset", offset, 0, 10**9), ("limit", limit, 1, 1000)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidRequest(f"{name} must be a whole number from {low} to {high}")
    where = {None: "1", True: "replaced_by IS NULL", False: "replaced_by IS NOT NULL"}[holding]
    rows = store.db.execute(
        f"SELECT {_FACT_COLUMNS} FROM facts WHERE {where} ORDER BY stated_at DESC, id DESC"
        " LIMIT ? OFFSET ?",
        (limit, offset),
    )
    total = store.db.execute(f"SELECT count(*) FROM facts WHERE {where}").fetchone()
    assert total is not None  # count(*) always returns a row
    return [_fact(r) for r in rows], int(total[0])


def facts_of_chunks(store: Store, chunk_ids: Sequence[int]) -> dict[int, Fact]:
    """The fact behind each chunk that is one (chunks of ordinary documents are absent)."""
    if not chunk_ids:
        return {}
    marks = ",".join("?" * len(chunk_ids))
    rows = store.db.execute(
        f"SELECT c.id, {', '.join('f.' + c for c in _FACT_COLUMNS.split(', '))} FROM chunks c"
        f" JOIN facts f ON f.document_id = c.document_id WHERE c.id IN ({marks})",
        tuple(chunk_ids),
    )
    return {row[0]: _fact(row[1:]) for row in rows}


def holding_first(store: Store, hits: list[Hit]) -> list[Hit]:
    """Step 6: among the first HOLDING_WINDOW places, the relevant facts that still hold before
    the relevant replaced ones, each group in its order, in the places the relevant ones held;
    the places of the unrelated (a fused score of 0: nothing above the base's crowd by meaning,
    no word of the question) and those past the window as they are. Holding is no relevance: an
    unrelated fact that holds never comes before a replaced one that answers. The window does
    not move with top_k (the search reads its places to the end, certain), so neither do the
    first results."""
    window, rest = hits[:HOLDING_WINDOW], hits[HOLDING_WINDOW:]
    facts = facts_of_chunks(store, [h.chunk_id for h in window])
    replaced = {c for c, fact in facts.items() if not fact.holds}
    places = [n for n, h in enumerate(window) if h.score > UNRELATED]
    relevant = [window[n] for n in places]
    holding = [h for h in relevant if h.chunk_id not in replaced]
    reordered = list(window)
    for place, hit in zip(
        places, holding + [h for h in relevant if h.chunk_id in replaced], strict=True
    ):
        reordered[place] = hit
    return reordered + rest

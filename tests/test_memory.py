"""Memories: what holds now comes first, what a newer fact replaced is still found, below."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from conftest import words_only_base
from pipeline_cases import remember_timeline
from test_rerank import RerankServer

from metis_lite.base.core import Base
from metis_lite.copies.backup import copy_base
from metis_lite.errors import InvalidRequest
from metis_lite.records import Filters
from metis_lite.store.connection import APPLICATION_ID


@pytest.fixture(scope="module")
def memory_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("memory") / "team.db"
    with Base(path, create=True) as base:
        base.configure(kind="memory")
        remember_timeline(base)
    return path


@pytest.fixture
def team(memory_file, tmp_path):
    copy = tmp_path / "team.db"
    copy.write_bytes(memory_file.read_bytes())
    with Base(copy) as base:
        yield base


def holds(result) -> bool:
    return result.fact.holds


def assert_holding_first(results, *, reranked: bool = False):
    """Among the results related to the question (a fused score above 0), what holds first;
    unreranked, the unrelated (fused 0) after them all, in the order of their cosines (a
    reranker's order keeps them where it put them)."""
    related = [r for r in results if r.scores.fused > 0]
    states = [holds(r) for r in related]
    assert states == sorted(states, reverse=True), states
    if reranked:
        return
    unrelated = results[len(related) :]
    assert all(r.scores.fused == 0 for r in unrelated)
    cosines = [r.scores.dense for r in unrelated if r.scores.dense is not None]
    assert cosines == sorted(cosines, reverse=True)


def test_replacement_by_key_and_explicitly(team):
    facts = {f.text: f for f in team.facts()[0]}
    assert not facts["Ana works on the billing service."].holds
    assert (
        facts["Ana works on the billing service."].replaced_by
        == facts["Ana works on the search team now."].id
    )
    assert not facts["Ana's role is backend engineer."].holds
    assert facts["Ana's role is engineering manager of the platform group."].holds
    assert not facts["Bruno leads the mobile app team."].holds
    assert facts["Bruno leads the mobile app team."].replaced_at == "2026-11-01T00:00:00Z"
    assert facts["Carla is based in the Lisbon office."].holds
    assert team.facts()[1] == 7 and team.facts(holding=True)[1] == 4


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
@pytest.mark.parametrize("rerank", [False, True])
def test_what_holds_comes_first_in_every_mode(team, mode, rerank):
    server = RerankServer() if rerank else None
    try:
        if server:
            team.configure(reranker={"provider": "tei", "url": server.url})
        answer = team.search("what does Ana work on", mode=mode)
        assert answer.reranked == rerank
        assert_holding_first(answer.results, reranked=rerank)
        texts = [r.text for r in answer.results]
        assert "Ana works on the billing service." in texts  # the old fact is still found, below
        if mode != "keyword":
            assert answer.results[0].text == "Ana works on the search team now."
    finally:
        if server:
            server.close()


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
@pytest.mark.parametrize("fusion", ["relative", "rrf"])
def test_an_unrelated_fact_that_holds_never_comes_before_a_related_one_replaced(team, mode, fusion):
    """Holding is no relevance: "Carla is based in the Lisbon office." (fused 0.0000 to a
    question on Ana) came before "Ana works on the billing service.", which answers it."""
    answer = team.search("what does Ana work on", mode=mode, fusion=fusion, top_k=10)
    texts = [r.text for r in answer.results]
    old = texts.index("Ana works on the billing service.")
    assert texts.index("Ana works on the search team now.") == 0
    for result in answer.results[old + 1 :]:
        assert result.scores.fused < answer.results[old].scores.fused or not holds(result)
    assert all(r.scores.fused > 0 for r in answer.results[: old + 1])
    assert_holding_first(answer.results)


def test_an_old_role_is_still_found(team):
    answer = team.search("what was Ana's role in September?")
    roles = [r for r in answer.results if "role" in r.text]
    assert roles[0].text.startswith("Ana's role is engineering manager")
    old = next(r for r in answer.results if r.text == "Ana's role is backend engineer.")
    assert old.fact.holds is False and old.fact.replaced_by is not None
    assert old.citation.source == "metis-team" and old.citation.kind == "note"


def test_facts_are_a_source_like_any_other(team, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ana.md").write_text("# Ana\n\nAna wrote the billing service design document.\n")
    team.add_source(folder)
    team.index()
    only_notes = team.search("Ana billing", filters=Filters(sources=("metis-team",)))
    assert only_notes.results and {r.citation.source for r in only_notes.results} == {"metis-team"}
    only_docs = team.search("Ana billing", filters=Filters(sources=("docs",)))
    assert {r.citation.document for r in only_docs.results} == {"ana.md"}
    assert only_docs.results[0].fact is None


def test_a_fact_added_elsewhere_is_found_by_the_next_search(team):
    assert not any("Dora" in r.text for r in team.search("Dora").results)
    with Base(team.path) as other:  # another process or the service's writer
        other.remember("Dora joined the security team.", subject="Dora")
    answer = team.search("who is in the security team?")
    assert answer.results[0].text == "Dora joined the security team."
    assert answer.results[0].scores.dense_rank == 1


def test_an_older_fact_imported_later_is_born_replaced(team):
    fact = team.remember(
        "Ana works on the payroll service.", stated_at="2025-12-01", key="ana/work"
    )
    assert not fact.holds
    current = [f for f in team.facts(holding=True)[0] if f.key == "ana/work"]
    assert [f.text for f in current] == ["Ana works on the search team now."]


def test_a_late_import_is_replaced_at_the_time_the_fact_replacing_it_was_stated(team):
    holder = next(f for f in team.facts(holding=True)[0] if f.key == "ana/work")
    late = team.remember(
        "Ana works on the invoicing service.", stated_at="2026-01-15", key="ana/work"
    )
    assert late.replaced_by == holder.id
    assert late.replaced_at == holder.stated_at == "2026-10-01T00:00:00Z"
    newer = team.remember("Ana works on the ranking team.", stated_at="2026-11-20", key="ana/work")
    replaced = next(f for f in team.facts()[0] if f.id == holder.id)
    assert (replaced.replaced_by, replaced.replaced_at) == (newer.id, "2026-11-20T00:00:00Z")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "needs some text"),
        ({"text": "   "}, "needs some text"),
        ({"text": "\x00\x00"}, "needs some text"),  # NUL only: nothing a reader sees
        ({"text": "\u200b\u2028\x1b"}, "needs some text"),  # zero-width, separator, ESC
        ({"text": "\u3164\u115f\uffa0"}, "needs some text"),  # Hangul fillers: draw nothing
        ({"text": "\u2800 \u2800"}, "needs some text"),  # braille blanks
        ({"text": "\u0301"}, "needs some text"),  # a combining mark alone
        ({"text": "\ufe0f\U000e0101"}, "needs some text"),  # variation selectors
        ({"text": "x", "subject": "\u3164"}, "subject"),
        ({"text": "x", "subject": "\x00"}, "subject"),
        ({"text": "x", "key": "\u200b"}, "key"),
        ({"text": "x", "stated_at": "0999-06-01"}, "year 1000"),
        ({"text": "x", "stated_at": "0001-01-01T00:00:00Z"}, "year 1000"),
        ({"text": "x", "stated_at": "1000-01-01T00:30:00+01:00"}, "year 1000"),  # 999 in UTC
        ({"text": "x", "replaces": [999]}, "does not exist"),
        ({"text": "x", "stated_at": "last tuesday"}, "ISO 8601"),
        ({"text": "x", "key": ""}, "key"),
    ],
)
def test_bad_facts_are_refused_and_nothing_is_half_written(team, kwargs, message):
    before = team.store.counts()
    with pytest.raises(InvalidRequest, match=message):
        team.remember(**kwargs)
    assert team.store.counts() == before and team.facts()[1] == 7


def test_a_cycle_of_replacements_is_refused(team):
    manager = next(f for f in team.facts()[0] if "engineering manager" in f.text)
    before = team.store.counts()
    with pytest.raises(InvalidRequest, match="cycle"):
        team.remember(
            "Ana's role is intern.", stated_at="2026-01-01", key="ana/role", replaces=[manager.id]
        )
    assert team.store.counts() == before


def test_a_fact_of_another_base_is_not_found_here(team, tmp_path):
    with Base(tmp_path / "other.db", create=True) as other:
        for i in range(10):
            other.remember(f"Fact number {i} of another base.")
        foreign = other.facts()[0][0].id
    assert foreign > 7
    with pytest.raises(InvalidRequest, match="does not exist in this base"):
        team.remember("x", replaces=[foreign])


def test_facts_over_http_are_found_by_the_next_search(team, tmp_path):
    import httpx
    from test_api import start_server, stop_server

    team.close()
    server = start_server(tmp_path, f"team={team.path}", "--poll", "0")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            added = client.post(
                "/v1/bases/team/facts",
                json={
                    "text": "Ana works on the recommendations team.",
                    "key": "ana/work",
                    "subject": "Ana",
                    "stated_at": "2026-11-20",
                },
            )
            assert added.status_code == 201 and added.json()["holds"] is True
            page = client.get("/v1/bases/team/facts", params={"limit": 2, "offset": 0}).json()
            assert page["total"] == 8 and len(page["facts"]) == 2
            assert page["facts"][0]["text"] == "Ana works on the recommendations team."
            replaced = client.get("/v1/bases/team/facts", params={"holding": "false"}).json()
            assert "Ana works on the search team now." in [f["text"] for f in replaced["facts"]]
            answer = client.post(
                "/v1/bases/team/search", json={"question": "what does Ana work on"}
            ).json()
            assert answer["results"][0]["text"] == "Ana works on the recommendations team."
            assert answer["results"][0]["fact"]["holds"] is True
            for body in (
                {"text": ""},
                {"text": "x", "replaces": [999]},
                {"text": "x", "extra": 1},
                {"text": "x", "replaces": "1"},
                {},
            ):
                refused = client.post("/v1/bases/team/facts", json=body)
                assert (
                    refused.status_code == 400
                    and refused.json()["error"]["code"] == "INVALID_REQUEST"
                )
            assert client.get("/v1/bases/team/facts", params={"limit": 0}).status_code == 400
            assert client.get("/v1/bases/nobody/facts").status_code == 404
            assert client.get("/v1/bases/team/facts").json()["total"] == 8  # nothing half-written
    finally:
        stop_server(server)


def words_memory(path):
    base = words_only_base(path)
    base.configure(kind="memory")
    return base


def test_years_have_four_digits_and_order_as_they_read(tmp_path):
    with words_memory(tmp_path / "years.db") as base:
        first = base.remember("Founded.", stated_at="1000-01-01", key="k")
        assert first.stated_at == "1000-01-01T00:00:00Z"
        later = base.remember("Moved.", stated_at="1999-12-31T23:00:00-02:00", key="k")
        assert later.stated_at == "2000-01-01T01:00:00Z" and later.holds
        assert not next(f for f in base.facts()[0] if f.id == first.id).holds


def notes_sources(path) -> list[str]:
    with closing(sqlite3.connect(path)) as plain:
        return [r[0] for r in plain.execute("SELECT name FROM sources WHERE path IS NULL")]


def test_the_notes_source_is_named_once_when_the_base_is_made(tmp_path):
    with words_memory(tmp_path / "team.db") as base:
        base.remember("Made as team.db.")
    copy_base(tmp_path / "team.db", tmp_path / "real-copy.db")
    (tmp_path / "team.db").rename(tmp_path / "renamed.db")
    for path, name in (
        (tmp_path / "real-copy.db", None),
        (tmp_path / "renamed.db", None),
        (tmp_path / "renamed.db", "docs"),  # NAME=PATH
    ):
        with Base(path, name=name) as base:
            fact = base.remember(f"Written through {path.name} as {name}.")
            assert base.notes_source == "metis-team"
            found = base.search("Written", mode="keyword", filters=Filters(sources=("metis-team",)))
            assert fact.id in {r.fact.id for r in found.results if r.fact}
        assert notes_sources(path) == ["metis-team"]


def test_several_notes_sources_of_an_older_base_are_joined_on_its_next_write(tmp_path):
    """A base written by older versions under three names: as `team`, as `copy` after a copy,
    as `docs` through NAME=PATH. Built by hand: facts moved to the sources those versions
    made, and the recorded name removed."""
    path = tmp_path / "team.db"
    with words_memory(path) as base:
        for n in range(6):
            base.remember(f"Old fact {n}.", key=f"k{n % 2}")
    with closing(sqlite3.connect(path)) as plain, plain:
        for name, docs in (
            ("metis-copy", "facts/3', 'facts/4"),
            ("metis-docs", "facts/5', 'facts/6"),
        ):
            plain.execute(
                "INSERT INTO sources (name, path, added_at) VALUES (?, NULL, 'x')", (name,)
            )
            plain.execute(
                f"UPDATE documents SET source_id = (SELECT id FROM sources WHERE name = ?)"
                f" WHERE path IN ('{docs}')",
                (name,),
            )
        plain.execute("DELETE FROM meta WHERE key = 'notes_source'")
        plain.execute("PRAGMA application_id = 0")
    assert sorted(notes_sources(path)) == ["metis-copy", "metis-docs", "metis-team"]
    with Base(path, name="docs") as base:
        assert len(base.search("Old fact", mode="keyword").results) == 6  # read as it is
        base.remember("The next write.")
        assert [s.name for s in base.sources()] == ["metis-team"]
        facts, total = base.facts()
        assert total == 7 and {f.text for f in facts} >= {f"Old fact {n}." for n in range(6)}
        holding = {f.key: f.text for f in base.facts(holding=True)[0] if f.key}
        assert holding == {"k0": "Old fact 4.", "k1": "Old fact 5."}
        found = base.search("fact", mode="keyword", filters=Filters(sources=("metis-team",)))
        assert len(found.results) == 7
    with closing(sqlite3.connect(path)) as plain:
        assert plain.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert plain.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"text": "Ana works on billing.\x00 Ignore what follows"},
        {"text": "Ana works on billing.", "subject": "Ana\x00"},
        {"text": "Ana works on billing.", "key": "ana/\x00work"},
    ],
    ids=["text", "subject", "key"],
)
def test_a_nul_inside_a_fact_is_refused_and_nothing_is_written(tmp_path, kwargs):
    import httpx
    from serving import served

    path = tmp_path / "nul.db"
    with words_memory(path) as base:
        base.remember("The first fact.")
        before = base.store.counts()
        with pytest.raises(InvalidRequest, match="NUL"):
            base.remember(**kwargs)
        assert base.store.counts() == before and base.facts()[1] == 1
    with served([f"team={path}"]) as server, httpx.Client(base_url=server.url) as client:
        refused = client.post("/v1/bases/team/facts", json=kwargs)
        total = client.get("/v1/bases/team/facts").json()["total"]
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "INVALID_REQUEST"
    assert "NUL" in refused.json()["error"]["message"] and total == 1

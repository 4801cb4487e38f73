"""Memories: what holds now comes first, what a newer fact replaced is still found, below."""

from __future__ import annotations

import pytest
from test_rerank import RerankServer

from metis_lite.base import Base
from metis_lite.errors import InvalidRequest
from metis_lite.records import Filters

TIMELINE = [
    # (text, stated_at, subject, key)
    ("Ana works on the billing service.", "2026-03-01", "Ana", "ana/work"),
    ("Ana's role is backend engineer.", "2026-06-01", "Ana", "ana/role"),
    ("Ana's role is engineering manager of the platform group.", "2026-09-15", "Ana", "ana/role"),
    ("Ana works on the search team now.", "2026-10-01", "Ana", "ana/work"),
    ("Bruno leads the mobile app team.", "2026-05-01", "Bruno", "bruno/work"),
    ("Carla is based in the Lisbon office.", "2026-02-01", "Carla", None),
]


@pytest.fixture(scope="module")
def memory_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("memory") / "team.db"
    with Base(path, create=True) as base:
        base.configure(kind="memory")
        for text, when, subject, key in TIMELINE:
            base.remember(text, stated_at=when, subject=subject, key=key)
        bruno = next(f for f in base.facts()[0] if f.subject == "Bruno")
        base.remember(
            "Bruno moved to the data platform team.",
            stated_at="2026-11-01",
            subject="Bruno",
            replaces=[bruno.id],
        )
    return path


@pytest.fixture
def team(memory_file, tmp_path):
    copy = tmp_path / "team.db"
    copy.write_bytes(memory_file.read_bytes())
    with Base(copy) as base:
        yield base


def holds(result) -> bool:
    return result.fact.holds


def assert_holding_first(results):
    states = [holds(r) for r in results]
    assert states == sorted(states, reverse=True), states


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
        assert_holding_first(answer.results)
        texts = [r.text for r in answer.results]
        assert "Ana works on the billing service." in texts  # the old fact is still found, below
        if mode != "keyword":
            assert answer.results[0].text == "Ana works on the search team now."
    finally:
        if server:
            server.close()


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


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "needs some text"),
        ({"text": "   "}, "needs some text"),
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

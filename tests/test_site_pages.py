"""Pages without their site: a page made by a documentation generator is read without what the
site repeats on every page (navigation, sidebars, breadcrumbs, skip links, headers and footers,
permalink glyphs), each section keeps its heading's anchor, and the title suffix a site gives
every page is cut. Each page below is shaped like its generator's own (Sphinx, MkDocs Material,
Docusaurus, Hugo, Javadoc, rustdoc), with FURNITURE written in every part a reader must not
get. Honest DOCX titles too: the core property when a real one, else the first heading."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import docx
import pytest
from conftest import words_only_base

from metis_lite.parsing import docx as docx_parser
from metis_lite.parsing import epub, html, titles
from metis_lite.text import chunking

SPHINX = """<!DOCTYPE html><html><head><meta charset="utf-8">
<title>Timeouts &#8212; Widget 2.1 documentation</title></head><body>
<div class="mobile-nav"><nav class="nav-content" role="navigation">FURNITURE search</nav></div>
<div class="related" role="navigation" aria-label="related navigation"><h3>Navigation</h3>
<ul><li><a href="genindex.html">FURNITURE index</a></li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="timeouts"><h1>Timeouts<a class="headerlink" href="#timeouts"
 title="Permalink to this heading">¶</a></h1>
<p>A widget waits thirty seconds for the gearbox.</p>
<dl class="py function"><dt class="sig sig-object py" id="widget.wait">
<span class="sig-name descname"><span class="pre">wait</span></span>()<a class="headerlink"
 href="#widget.wait" title="Permalink to this definition">¶</a></dt>
<dd><p>Blocks until the gearbox answers.</p></dd></dl>
<section id="retries"><h2>Retries<a class="headerlink" href="#retries">¶</a></h2>
<p>Three retries follow a timeout.</p></section></section>
</div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation">
<h3>Table of Contents</h3><ul><li>FURNITURE sidebar</li></ul></div></div>
<div class="footer">FURNITURE © Copyright. Created using Sphinx.</div>
</body></html>"""

MKDOCS_MATERIAL = """<!doctype html><html><head><title>Timeouts - Widget Docs</title></head>
<body><div data-md-component="skip"><a href="#timeouts" class="md-skip">Skip to content</a></div>
<header class="md-header"><nav class="md-header__inner" aria-label="Header">FURNITURE head</nav>
</header><div class="md-container"><nav class="md-tabs" aria-label="Tabs">FURNITURE tabs</nav>
<main class="md-main"><div class="md-main__inner md-grid">
<div class="md-sidebar md-sidebar--primary"><nav class="md-nav">FURNITURE nav</nav></div>
<div class="md-sidebar md-sidebar--secondary"><nav class="md-nav md-nav--secondary"
 aria-label="Table of contents">FURNITURE toc</nav></div>
<div class="md-content"><article class="md-content__inner md-typeset">
<a href="https://github.com/x/edit/docs/timeouts.md" title="Edit this page" class="md-content__button md-icon"></a>
<h1 id="timeouts">Timeouts<a class="headerlink" href="#timeouts" title="Permanent link">¶</a></h1>
<p>A widget waits thirty seconds for the gearbox.</p>
<h2 id="retries">Retries<a class="headerlink" href="#retries" title="Permanent link">¶</a></h2>
<p>Three retries follow a timeout.</p></article></div></div></main>
<footer class="md-footer"><nav aria-label="Footer">FURNITURE footer</nav></footer></div>
</body></html>"""

DOCUSAURUS = """<!doctype html><html><head><title>Timeouts | Widget Docs</title></head><body>
<div role="region" aria-label="Skip to main content"><a class="skipToContent_fXgn"
 href="#__docusaurus_skipToContent_fallback">Skip to main content</a></div>
<nav aria-label="Main" class="navbar navbar--fixed-top">FURNITURE navbar</nav>
<div class="main-wrapper"><div class="docRoot"><aside class="theme-doc-sidebar-container">
FURNITURE sidebar</aside><main class="docMainContainer"><div class="container"><div class="row">
<div class="col docItemCol"><div class="docItemContainer"><article>
<nav class="theme-doc-breadcrumbs" aria-label="Breadcrumbs"><ul class="breadcrumbs">
<li>FURNITURE crumb</li></ul></nav>
<div class="theme-doc-markdown markdown"><header><h1>Timeouts</h1></header>
<p>A widget waits thirty seconds for the gearbox.</p>
<h2 class="anchor anchorWithStickyNavbar" id="retries">Retries<a href="#retries"
 class="hash-link" aria-label="Direct link to Retries" title="Direct link to Retries">\u200b</a></h2>
<p>Three retries follow a timeout.</p></div>
<footer class="theme-doc-footer"><a href="https://github.com/x/edit/docs/timeouts.md">FURNITURE
Edit this page</a></footer></article>
<nav class="pagination-nav" aria-label="Docs pages">FURNITURE next</nav></div></div>
<div class="col col--3"><div class="tableOfContents theme-doc-toc-desktop">
<ul class="table-of-contents"><li><a href="#retries">FURNITURE toc</a></li></ul></div></div>
</div></div></main></div></div><footer class="footer footer--dark">FURNITURE footer</footer>
</body></html>"""

HUGO = """<!DOCTYPE html><html><head><title>Timeouts | Widget Site</title></head><body>
<a class="skip-link" href="#content">Skip to content</a>
<header class="site-header"><a href="/">FURNITURE Widget Site</a></header>
<aside class="book-menu">FURNITURE menu</aside>
<div class="book-page" id="content">
<ol class="breadcrumb"><li><a href="/">FURNITURE Home</a></li><li>FURNITURE Docs</li></ol>
<h1 id="timeouts">Timeouts <a class="anchor" href="#timeouts">#</a></h1>
<p>A widget waits thirty seconds for the gearbox.</p>
<h2 id="retries">Retries <a class="anchor" href="#retries">🔗</a></h2>
<p>Three retries follow a timeout.</p>
<h2 id="c-sharp">C#</h2><p>The C sharp client retries too.</p>
</div><footer>FURNITURE footer</footer></body></html>"""

JAVADOC = """<!DOCTYPE HTML><html lang="en"><head><title>Gearbox (Widget 2.1 API)</title></head>
<body class="class-declaration-page"><div class="flex-box">
<header role="banner" class="flex-header"><nav role="navigation">
<div class="top-nav" id="navbar-top">FURNITURE nav</div><div class="sub-nav">FURNITURE sub</div>
</nav></header><div class="flex-content"><main role="main">
<div class="header"><div class="sub-title">Package widget</div>
<h1 title="Class Gearbox" class="title">Class Gearbox</h1></div>
<section class="class-description" id="class-description">
<div class="block">A gearbox waits thirty seconds.</div></section>
<section class="details"><ul class="details-list"><li>
<section class="method-details" id="method-detail"><h2>Method Details</h2>
<ul class="member-list"><li><section class="detail" id="waitFor(int)">
<h3>waitFor<a href="#waitFor(int)" class="anchor-link" aria-label="Link to this section">
<img src="../link.svg" alt="Link icon" width="16" height="16"></a></h3>
<div class="member-signature">public void waitFor(int seconds)</div>
<div class="block">Blocks for the seconds given.</div></section></li></ul></section>
</li></ul></section></main>
<footer role="contentinfo"><p class="legal-copy"><small>FURNITURE Copyright</small></p></footer>
</div></div></body></html>"""

RUSTDOC = """<!DOCTYPE html><html lang="en"><head><title>Gearbox in widget::gear - Rust</title>
</head><body class="rustdoc struct"><nav class="mobile-topbar">FURNITURE top</nav>
<nav class="sidebar">FURNITURE sidebar</nav><main><div class="width-limiter">
<section id="main-content" class="content"><div class="main-heading"><h1>Struct
<a href="index.html">widget</a>::<wbr><a class="struct" href="#">Gearbox</a>
<button id="copy-path" title="Copy item path to clipboard">FURNITURE copy</button></h1></div>
<details class="toggle top-doc" open><summary class="hideme"><span>Expand description</span>
</summary><div class="docblock"><p>A gearbox waits thirty seconds.</p></div></details>
<h2 id="implementations" class="section-header">Implementations<a href="#implementations"
 class="anchor">§</a></h2><div id="implementations-list"><details class="toggle" open>
<summary><section id="impl-Gearbox" class="impl"><a href="#impl-Gearbox" class="anchor">§</a>
<h3 class="code-header">impl Gearbox</h3></section></summary><div class="impl-items">
<details class="toggle method-toggle" open><summary><section id="method.wait" class="method">
<a href="#method.wait" class="anchor">§</a><h4 class="code-header">pub fn wait(&amp;self)</h4>
</section></summary><div class="docblock"><p>Blocks until the gearbox answers.</p></div>
</details></div></details></div></section></div></main></body></html>"""

DOCBOOK = """<!DOCTYPE html><html><head><title>5.11. Timeouts</title></head>
<body id="docContent"><div class="navheader"><table width="100%" summary="Navigation header">
<tr><th colspan="5" align="center">FURNITURE 5.11. Timeouts</th></tr><tr><td><a accesskey="p"
 href="ddl-inherit.html">FURNITURE Prev</a></td><td><a accesskey="u" href="ddl.html"
 title="Chapter 5. Widgets">Up</a></td><th>FURNITURE Chapter 5</th><td><a href="index.html">Home
</a></td></tr></table><hr /></div>
<div class="sect1" id="DDL-TIMEOUTS"><div class="titlepage"><div><div><h2 class="title"
 style="clear: both">5.11. Timeouts</h2></div></div></div>
<p>A widget waits thirty seconds for the gearbox.</p>
<div class="sect2" id="DDL-TIMEOUTS-RETRIES"><div class="titlepage"><div><div>
<h3 class="title">5.11.1. Retries</h3></div></div></div><p>Three retries follow a timeout.</p>
<div class="refsect2" id="SQL-RETRY-CONCURRENTLY"><h4>Retrying Concurrently</h4>
<p>Two widgets may retry at once.</p></div></div></div>
<div class="navfooter"><hr /><table width="100%" summary="Navigation footer"><tr><td>
<a accesskey="p" href="ddl-inherit.html">FURNITURE Prev</a></td><td>Up</td><td>Next</td></tr>
</table></div></body></html>"""

TEXINFO = """<!DOCTYPE html><html><head><title>Timeouts (Widget Manual)</title>
<link href="index.html" rel="up" title="Top"></head><body>
<div class="chapter-level-extent" id="Timeouts"><div class="nav-panel"><p>
FURNITURE Next: <a href="Retries.html" accesskey="n" rel="next">Retries</a>, Up: <a
 href="index.html" accesskey="u" rel="up">Top</a></p></div><hr>
<h2 class="chapter"><span>1 Timeouts<a class="copiable-link" href="#Timeouts"> &para;</a></span>
</h2><p>A widget waits thirty seconds for the gearbox.</p>
<div class="section-level-extent" id="Retries"><h3 class="section">1.1 Retries</h3>
<p>Three retries follow a timeout.</p></div></div></body></html>"""

OLD_SPHINX = """<html><head><title>Timeouts &#8212; Widget 1.0 documentation</title></head><body>
<div class="related" role="navigation"><ul><li>FURNITURE index</li>
<li><a href="machines.html" accesskey="U">Machines</a></li></ul></div>
<div class="body" role="main"><div class="section" id="timeouts"><span id="waiting"></span>
<h1>Timeouts</h1><p>A widget waits thirty seconds for the gearbox.</p>
<div class="section" id="retries"><h2>Retries</h2><p>Three retries follow a timeout.</p>
<div class="admonition note" id="retry-note"><p>A note.</p></div><h3>Backoff</h3>
<p>Each retry waits longer.</p></div></div></div></body></html>"""

GENERATORS = {
    "docbook": (
        DOCBOOK,
        "5.11. Timeouts",
        [  # under their chapter, the title of the bar's "Up"
            (("Chapter 5. Widgets", "5.11. Timeouts"), "DDL-TIMEOUTS"),
            (("Chapter 5. Widgets", "5.11. Timeouts", "5.11.1. Retries"), "DDL-TIMEOUTS-RETRIES"),
            (
                (
                    "Chapter 5. Widgets",
                    "5.11. Timeouts",
                    "5.11.1. Retries",
                    "Retrying Concurrently",
                ),
                "SQL-RETRY-CONCURRENTLY",
            ),
        ],
    ),
    "texinfo": (
        TEXINFO,
        "Timeouts (Widget Manual)",
        [(("1 Timeouts",), "Timeouts"), (("1 Timeouts", "1.1 Retries"), "Retries")],
    ),
    "sphinx-before-html5": (
        OLD_SPHINX,
        "Timeouts — Widget 1.0 documentation",
        [  # under their parent page, named by the bar's link of access key U
            (("Machines", "Timeouts"), "timeouts"),
            (("Machines", "Timeouts", "Retries"), "retries"),
            (("Machines", "Timeouts", "Retries", "Backoff"), None),
        ],
    ),
    "sphinx": (
        SPHINX,
        "Timeouts — Widget 2.1 documentation",
        [(("Timeouts",), "timeouts"), (("Timeouts", "Retries"), "retries")],
    ),
    "mkdocs-material": (
        MKDOCS_MATERIAL,
        "Timeouts - Widget Docs",
        [(("Timeouts",), "timeouts"), (("Timeouts", "Retries"), "retries")],
    ),
    "docusaurus": (
        DOCUSAURUS,
        "Timeouts | Widget Docs",
        [(("Timeouts",), None), (("Timeouts", "Retries"), "retries")],
    ),
    "hugo": (
        HUGO,
        "Timeouts | Widget Site",
        [
            (("Timeouts",), "timeouts"),
            (("Timeouts", "Retries"), "retries"),
            (("Timeouts", "C#"), "c-sharp"),
        ],
    ),
    "javadoc": (
        JAVADOC,
        "Gearbox (Widget 2.1 API)",
        [
            ((), None),  # "Package widget", above the class's heading
            (("Class Gearbox",), None),
            (("Class Gearbox", "Method Details", "waitFor"), "waitFor(int)"),
        ],
    ),
    "rustdoc": (
        RUSTDOC,
        "Gearbox in widget::gear - Rust",
        [
            (("Struct widget::Gearbox",), "main-content"),
            (
                ("Struct widget::Gearbox", "Implementations", "impl Gearbox", "pub fn wait(&self)"),
                "method.wait",
            ),
        ],
    ),
}
"""Each generator's page, its title as read, and its sections' (headings, anchor) in order."""

GLYPHS = ("¶", "§", "🔗", "\u200b", "Skip to")


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_a_generators_page_is_read_without_its_site(generator):
    page, title, places = GENERATORS[generator]
    read = html.parse(page.encode(), name="timeouts")
    assert read.title == title
    assert [(s.headings, s.anchor) for s in read.sections] == places
    everything = "\n".join(" ".join((*s.headings, s.text)) for s in read.sections)
    assert "FURNITURE" not in everything
    assert not [glyph for glyph in GLYPHS if glyph in everything], everything
    assert "waits thirty seconds" in everything
    assert "Blocks" in everything or "retries follow" in everything


def test_a_chunk_cites_its_sections_anchor():
    long = "Three retries follow a timeout, each after a longer wait. " * 30
    read = html.parse(SPHINX.replace("Three retries follow a timeout.", long).encode(), name="t")
    chunks = chunking.chunk(read, chunk_size=1200)
    assert (chunks[0].headings, chunks[0].anchor) == (("Timeouts",), "timeouts")
    assert {(c.headings[-1], c.anchor) for c in chunks[1:]} == {("Retries", "retries")}
    assert "wait()" in chunks[0].text and "¶" not in chunks[0].text


def test_a_heading_ending_in_a_permalink_glyph_as_text_reads_without_it():
    page = b"<h2 id='timeouts'>Timeouts\xc2\xb6</h2><p>Thirty seconds.</p><h2>C#</h2><p>Sharp.</p>"
    read = html.parse(page, name="p")
    assert [(s.headings, s.anchor) for s in read.sections] == [
        (("Timeouts",), "timeouts"),
        (("C#",), None),
    ]


def test_an_empty_main_falls_back_to_the_body():
    page = b"""<html><body><nav>FURNITURE</nav><main>  <p> </p> </main>
    <div><h1 id="t">Timeouts</h1><p>The body holds the words.</p></div></body></html>"""
    read = html.parse(page, name="p")
    assert [(s.headings, s.anchor, s.text) for s in read.sections] == [
        (("Timeouts",), "t", "The body holds the words.")
    ]


def test_main_is_preferred_and_an_article_within_it_when_it_is_the_only_one():
    page = b"""<body><div>Outside words</div><main><p>Main words</p>
    <article><p>Article words</p></article></main></body>"""
    assert html.parse(page, name="p").sections[0].text == "Article words"
    two = page.replace(b"</main>", b"<article><p>Second article</p></article></main>")
    assert html.parse(two, name="p").sections[0].text.split("\n\n") == [
        "Main words",
        "Article words",
        "Second article",
    ]
    aside = page.replace(b"<div>", b"<aside><article>Related</article></aside><div>")
    assert html.parse(aside, name="p").sections[0].text == "Article words"


def test_a_section_before_any_heading_has_no_anchor_and_a_sections_id_is_its_headings():
    page = b"""<main><p>Before any heading.</p><section id="gears"><h2>Gears</h2>
    <p>Gear words.</p><h3>Teeth</h3><p>Teeth words.</p></section></main>"""
    read = html.parse(page, name="p")
    assert [(s.headings, s.anchor) for s in read.sections] == [
        ((), None),
        (("Gears",), "gears"),
        (("Gears", "Teeth"), "gears"),
    ]


def test_an_epub_chapters_sections_keep_their_anchors():
    from test_formats import chapter
    from test_formats import epub as make_epub

    book = make_epub(
        {"one.xhtml": chapter("One", '<h1 id="storm">The Storm</h1><p>Waves broke.</p>')}
    )
    read = epub.parse(book, name="book")
    assert [(s.headings, s.anchor) for s in read.sections] == [(("One", "The Storm"), "storm")]


# --- a site's title suffix ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shown", "suffix"),
    [
        (
            [
                "argparse — Parser for command-line options — Python 3.11.2 documentation",
                "json — JSON encoder and decoder — Python 3.11.2 documentation",
                "Timeouts — Python 3.11.2 documentation",
                "Python 3.11.2 documentation",
            ],
            " — Python 3.11.2 documentation",
        ),
        (["Vec in std::vec - Rust", "Option in std::option - Rust", "std - Rust"], " - Rust"),
        (["Install | Docs", "Usage | Docs", "API | Docs", "Hello"], " | Docs"),
        (
            [
                "String (Java SE 17 & JDK 17)",
                "List (Java SE 17 & JDK 17)",
                "Map (Java SE 17 & JDK 17)",
            ],
            " (Java SE 17 & JDK 17)",
        ),
        (["A - Docs", "B - Docs"], ""),  # two pages are not a site
        (["A - Docs", "B - Docs", "C - Docs", "D", "E", "F", "G"], ""),  # not most of them
        (["git-add(1)", "git-am(1)", "git-log(1)"], ""),  # no words in it
        (["ls (1)", "cp (1)", "mv (1)"], ""),
    ],
)
def test_a_sites_suffix_is_what_most_of_its_pages_end_with(shown, suffix):
    assert titles.site_suffix(shown) == suffix
    assert titles.site_suffix(reversed(shown)) == suffix  # whatever the order


def test_a_suffix_is_cut_only_where_something_is_left():
    suffix = " — Python 3.11.2 documentation"
    assert titles.cut_suffix("Timeouts — Python 3.11.2 documentation", suffix) == "Timeouts"
    assert titles.cut_suffix("Python 3.11.2 documentation", suffix) == "Python 3.11.2 documentation"
    assert titles.cut_suffix("Other page", suffix) == "Other page"


def sphinx_page(title: str, words: str) -> str:
    return SPHINX.replace("Timeouts &#8212;", f"{title} &#8212;").replace(
        "A widget waits thirty seconds for the gearbox.", words
    )


def _titles(base) -> dict[str, str]:
    with base.reading() as store:
        return dict(store.db.execute("SELECT path, title FROM documents"))


def test_a_sites_title_suffix_is_cut_and_stays_cut_when_one_page_is_indexed_again(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    pages = {"gears": "Gearbox ratios", "timeouts": "Thirty second waits", "pumps": "Pump flow"}
    for name, words in pages.items():
        (site / f"{name}.html").write_text(sphinx_page(name.title(), words), encoding="utf-8")
    (site / "index.html").write_text(
        "<title>Widget 2.1 documentation</title><p>Front page words</p>", encoding="utf-8"
    )
    base_path = tmp_path / "b.db"
    with words_only_base(base_path, site) as base:
        base.index()
        expected = {
            "gears.html": "Gears",
            "timeouts.html": "Timeouts",
            "pumps.html": "Pumps",
            "index.html": "Widget 2.1 documentation",
        }
        assert _titles(base) == expected
        hits = base.search("documentation", mode="keyword").results
        assert [r.citation.document for r in hits] == ["index.html"]  # not in every context
        result = base.search("ratios", mode="keyword").results[0]
        assert (result.citation.title, result.citation.anchor) == ("Gears", "timeouts")
        page = site / "pumps.html"
        page.write_text(sphinx_page("Pumps", "Pump flow and pressure"), encoding="utf-8")
        os.utime(page, (1, 1))
        report = base.index()
        assert (report.updated, report.unchanged) == (1, 3)
        assert _titles(base) == expected


# --- DOCX titles --------------------------------------------------------------------------------


def _docx(core_title: str | None, paragraphs: list[tuple[str, str]]) -> bytes:
    made = docx.Document()
    made.core_properties.title = core_title or ""
    for style, text in paragraphs:
        made.add_paragraph(text, style=style)
    out = io.BytesIO()
    made.save(out)
    return out.getvalue()


BODY = ("Normal", "The quarterly figures were reviewed by the board in March.")


@pytest.mark.parametrize(
    ("core_title", "paragraphs", "title"),
    [
        ("Quarterly Review 2025", [("Heading 1", "Results"), BODY], "Quarterly Review 2025"),
        ("Document1", [("Heading 1", "Results of the Review"), BODY], "Results of the Review"),
        ("Microsoft Word - review.docx", [("Title", "The Review"), BODY], "The Review"),
        ("review", [("Heading 2", "Board Minutes"), BODY], "Board Minutes"),  # the file's name
        ("", [("Heading 1", "Results"), ("Title", "The Review"), BODY], "The Review"),
        ("", [("Heading 2", "Minutes"), ("Heading 1", "Results"), BODY], "Results"),
        ("", [("Heading 1", "results of the"), BODY], "review"),  # not a title: the name
        (None, [BODY], "review"),
    ],
)
def test_a_docx_title_is_its_core_title_when_real_else_its_first_heading(
    core_title, paragraphs, title
):
    assert docx_parser.parse(_docx(core_title, paragraphs), name="review").title == title


def test_the_console_leaves_out_what_the_index_leaves_out():
    """The console shows a page without the furniture the index reads it without: the same
    roles and generators' classes (console/document.js's PAGE_FURNITURE)."""
    script = (Path(html.__file__).parents[1] / "console" / "document.js").read_text()
    furniture = re.search(r"const PAGE_FURNITURE = \[(.*?)\]\.join", script, re.S)
    assert furniture, "PAGE_FURNITURE not found in document.js"
    named = set(re.findall(r'"([a-z-]+)"', furniture.group(1)))
    # Forms (role form) are left out of the words but stay in the page shown.
    assert html.FURNITURE_CLASSES | (html.SKIPPED_ROLES - {"form"}) <= named
    assert {"nav", "aside", "footer"} <= named


# --- lists of links ----------------------------------------------------------------------------

LINKS = "".join(f'<li><a href="page{n}.html">Other page number {n}</a></li>' for n in range(6))


def test_a_list_of_links_to_other_pages_is_left_out_and_a_list_that_says_something_is_read():
    page = f"""<main><h1 id="gears">Gears</h1><p>A gearbox waits thirty seconds.</p>
    <ul>{LINKS}</ul>
    <ul><li><a href="a.html">Timeouts</a>: how long a gearbox waits before it retries.</li>
    <li><a href="b.html">Retries</a>: how many times a widget asks again after a timeout.</li></ul>
    <ul><li><a href="c.html">Sprockets</a></li><li><a href="d.html">Chains</a></li></ul>
    </main>"""
    [section] = html.parse(page.encode(), name="p").sections
    assert "Other page" not in section.text  # six links, nothing of their own
    assert "how many times a widget asks again" in section.text  # links that are explained
    assert "Sprockets" in section.text  # too short a list to say it is the site's


def test_a_definitions_permalink_glyph_is_no_link_to_another_page():
    entries = "".join(
        f'<dt id="os.O_{n}">os.O_{n}<a class="headerlink" href="#os.O_{n}">¶</a></dt>'
        for n in ("RDONLY", "WRONLY", "RDWR", "APPEND", "CREAT", "EXCL", "TRUNC", "SYNC")
    )
    page = f"<main><h1>os</h1><dl>{entries}<dd>Flags for the mode of open().</dd></dl></main>"
    [section] = html.parse(page.encode(), name="p").sections
    assert "os.O_RDONLY" in section.text and "¶" not in section.text


def test_a_page_of_nothing_but_links_is_not_indexed_and_says_why():
    page = f"<html><body><main><h1>Index</h1><h2>A</h2><ul>{LINKS}</ul></main></body></html>"
    with pytest.raises(html.ParseError, match="only links to other pages"):
        html.parse(page.encode(), name="genindex")
    plain = b"<html><body><h1>Index</h1><h2>A</h2></body></html>"  # headings alone: read
    assert [s.text for s in html.parse(plain, name="p").sections] == ["Index", "A"]


def test_what_a_site_marks_as_not_for_its_search_is_left_out():
    page = b"""<body><div class=nosearch><div class="tagline">FURNITURE Small. Fast.</div>
    <ul><li><a href="index.html">Home</a><li><a href="about.html">About</a></ul></div>
    <div data-pagefind-ignore="all">FURNITURE related posts</div>
    <h1>Gears</h1><p>A gearbox waits thirty seconds.</p></body>"""
    [section] = html.parse(page, name="p").sections
    assert "FURNITURE" not in section.text and "Home" not in section.text
    assert section.text == "A gearbox waits thirty seconds."


def test_no_more_lists_than_the_bound_are_measured_for_their_links(monkeypatch):
    monkeypatch.setattr(html, "LINK_LISTS_MAX", 2)
    lists = "".join(f"<ul>{LINKS.replace('Other', f'List{n}')}</ul>" for n in range(3))
    [section] = html.parse(f"<main><h1>Gears</h1>{lists}</main>".encode(), name="p").sections
    assert "List0" not in section.text and "List1" not in section.text
    assert "List2 page number 5" in section.text  # past the bound: read as any text


def test_a_list_of_links_within_the_page_is_read_as_what_the_page_holds():
    questions = "".join(
        f'<li><a href="#q{n}">How do I turn gear number {n} the other way?</a></li>'
        for n in range(4)
    )
    page = f"""<main><h1>FAQ</h1><ol>{questions}</ol><p><b>(1) How do I turn a gear?</b></p>
    <p>Turn it by its shaft.</p></main>"""
    [section] = html.parse(page.encode(), name="faq").sections
    assert "How do I turn gear number 3 the other way?" in section.text


def test_a_pages_parent_heads_its_passages_by_rel_up_and_not_when_it_is_the_page():
    body = b"<h1>Gears</h1><p>A gearbox waits thirty seconds.</p>"
    up = b'<html><head><title>Gears</title><link rel="up" href="m.html" title="Machines"></head>'
    [section] = html.parse(up + b"<body>" + body, name="p").sections
    assert section.headings == ("Machines", "Gears")
    itself = up.replace(b'title="Machines"', b'title="Gears"')
    assert html.parse(itself + b"<body>" + body, name="p").sections[0].headings == ("Gears",)
    [chunk] = chunking.chunk(html.parse(up + b"<body>" + body, name="p"), chunk_size=1200)
    assert chunk.headings == ("Machines", "Gears")  # in its context, by words and by meaning

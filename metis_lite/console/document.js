/* A result's document, opened at its place: the Document page (#/document?…) shows a text or
 * Markdown file with its lines numbered and the cited passage's lines marked and scrolled to
 * (below the page's head, which stays in view with its Back link), and an HTML page in a
 * sandboxed frame as tall as the page it holds (no script, no form: it is shown, never run),
 * without its site (its content alone, as the index read it: see PAGE_FURNITURE) and scrolled
 * to the cited heading (`anchor`); a PDF opens in the browser's own viewer at the cited page,
 * a Word file is downloaded.
 *
 * Every file comes from the service's GET /v1/bases/{base}/documents/{source}/{path}, which
 * serves only documents the base has indexed, from inside its sources, to a token allowed that
 * base. A plain link cannot carry the token, so when there is one the file is fetched with it
 * and opened from memory.
 */

import { file, hasToken } from "./api.js";
import { $, el } from "./dom.js";

const SHOWN_HERE = new Set(["md", "txt", "html"]);
const MAX_LINES_SHOWN = 20000;
const LINES_AROUND = 5000;
const PASSAGE_MARGIN_PX = 16; // room kept between the page's head and a passage scrolled to

/* What a site repeats on every page, left out of an HTML page shown, as metis_lite/parsing/html.py
 * leaves it out of the index: navigation, sidebars, footers, elements of a furniture role,
 * breadcrumbs, generators' bars marked by class alone (html.py's FURNITURE_CLASSES: DocBook's,
 * Texinfo's, Doxygen's) (and the page's header: one outside its content). The page's content
 * (CONTENT, then its one <article>) is shown alone when it has one with text. */
const PAGE_FURNITURE = [
  "nav", "aside", "footer", "[class*='breadcrumb' i]", "[data-pagefind-ignore]",
  ...["navheader", "navfooter", "nav-panel", "navpath", "toc", "nosearch"].map((name) => `[class~='${name}']`),
  ...["navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "toolbar"]
    .map((role) => `[role~='${role}' i]`),
].join(", ");
const CONTENT = ["main", "[role~='main' i]"];

/** The service's address of a document's file. */
export function documentUrl(base, source, path) {
  const parts = [base, source, ...path.split("/")].map(encodeURIComponent);
  return `/v1/bases/${parts[0]}/documents/${parts.slice(1).join("/")}`;
}

/** The link from a result to its document at its page or its lines; null for a note (no
 * file). A passage's lines are the file's own from its line on (chunking keeps them), so its
 * last line is its first plus the line breaks of its `text`. */
export function documentLink(base, citation, label, text = "") {
  if (!base || !citation || citation.kind === "note") return null;
  const { source, document, page, line, anchor } = citation;
  if (SHOWN_HERE.has(citation.kind)) {
    const params = new URLSearchParams({ base, source, path: document });
    if (anchor) params.set("anchor", anchor);
    if (line) {
      params.set("line", String(line));
      const breaks = (text.match(/\n/g) || []).length;
      if (breaks) params.set("end", String(line + breaks));
    }
    return el("a", { className: "doc", attrs: { href: `#/document?${params}` } }, label);
  }
  const url = documentUrl(base, source, document) + (page ? `#page=${page}` : "");
  const link = el(
    "a",
    { className: "doc", attrs: { href: url, target: "_blank", rel: "noopener", title: "Opens in a new tab" } },
    label
  );
  link.addEventListener("click", (event) => {
    if (!hasToken()) return; // the browser follows the link itself
    event.preventDefault();
    openWithToken(documentUrl(base, source, document), page);
  });
  return link;
}

/** A tab opened now (while the click still counts as the person's), filled once the file came. */
async function openWithToken(url, page) {
  const tab = window.open("about:blank", "_blank");
  try {
    const blob = await file(url);
    const address = URL.createObjectURL(blob) + (page ? `#page=${page}` : "");
    if (tab) tab.location.href = address;
    else location.href = address;
  } catch (error) {
    if (tab) tab.close();
    alert(`The document could not be opened: ${error.message}`);
  }
}

/** The Document page for #/document?base=…&source=…&path=…&line=N&end=M (the passage's
 * first and last lines; `end` absent: one line), or …&anchor=ID (an HTML page's heading). */
export async function showDocumentPage(query) {
  const params = new URLSearchParams(query);
  const base = params.get("base") || "";
  const source = params.get("source") || "";
  const path = params.get("path") || "";
  const line = parseInt(params.get("line"), 10) || null;
  const anchor = params.get("anchor") || "";
  // A passage is a chunk: at most LINES_AROUND lines are marked, whatever the address says.
  const end = line ? Math.min(line + LINES_AROUND, Math.max(line, parseInt(params.get("end"), 10) || line)) : null;
  const kind = (path.split(".").pop() || "").toLowerCase();
  $("document-heading").textContent = `${source}/${path}`;
  const place = line && end > line ? `lines ${line}–${end}` : line ? `line ${line}` : anchor ? `#${anchor}` : null;
  $("document-meta").textContent = [base, place].filter(Boolean).join(" · ");
  const body = $("document-body");
  body.replaceChildren(el("p", { className: "muted" }, "Reading the document…"));
  let blob;
  try {
    blob = await file(documentUrl(base, source, path));
  } catch (error) {
    body.replaceChildren(
      el(
        "p",
        { className: "error" },
        el("strong", {}, "The document could not be read: "),
        error.message,
        error.code ? el("span", { className: "code" }, ` (${error.code})`) : null
      )
    );
    return;
  }
  const text = await blob.text();
  if (kind === "html" || kind === "htm") {
    // No allow-scripts: no script runs in it, no form is sent, no window opens. allow-same-origin
    // lets this page read how tall the frame's page is, to show it whole; it can run nothing.
    const frame = el("iframe", {
      className: "document-frame",
      attrs: { sandbox: "allow-same-origin", title: path },
    });
    frame.addEventListener("load", () => {
      withoutSite(frame.contentDocument);
      fitFrame(frame);
      scrollToAnchor(frame, anchor);
    });
    frame.srcdoc = text;
    body.replaceChildren(frame);
    return;
  }
  body.replaceChildren(...[numberedLines(text, line, end)].flat());
  scrollToPassage(body);
}

/** The page in the frame without its site: its furniture removed, its content alone when it
 * has some (an empty <main> leaves the page as it is). */
function withoutSite(inside) {
  if (!inside || !inside.body) return;
  for (const node of inside.querySelectorAll(PAGE_FURNITURE)) node.remove();
  for (const node of inside.querySelectorAll("header")) {
    if (!node.parentElement.closest("main, article, section")) node.remove(); // the page's own
  }
  const region = CONTENT.map((selector) => inside.querySelector(selector)).find(Boolean);
  const articles = (region || inside).querySelectorAll("article");
  const content = articles.length === 1 ? articles[0] : region;
  if (!content || !content.textContent.trim()) return;
  // Its styles stay (and its scripts, which never run here): the page looks as its site made it.
  const kept = [...inside.body.querySelectorAll("style, link, script")].filter((n) => !content.contains(n));
  inside.body.replaceChildren(content, ...kept);
}

/** The window scrolled so that the frame's element of id `anchor` is just below the page's
 * head (the frame is as tall as its page: the window, not the frame, scrolls). */
function scrollToAnchor(frame, anchor) {
  const target = anchor && frame.contentDocument && frame.contentDocument.getElementById(anchor);
  if (!target) return;
  const head = $("document-head").getBoundingClientRect().height + PASSAGE_MARGIN_PX;
  const top = frame.getBoundingClientRect().top + window.scrollY + target.getBoundingClientRect().top;
  window.scrollTo({ top: Math.max(0, top - head), behavior: "instant" });
}

/** The frame as tall as the page in it, so its last line shows and the page scrolls as one. */
function fitFrame(frame) {
  const inside = frame.contentDocument;
  if (!inside || !inside.documentElement) return;
  const fit = () => {
    const borders = frame.offsetHeight - frame.clientHeight;
    frame.style.height = "0px"; // measured at its least, so it can shrink as well as grow
    frame.style.height = `${inside.documentElement.scrollHeight + borders}px`;
  };
  fit();
  window.addEventListener("resize", fit);
  const gone = new MutationObserver(() => {
    if (frame.isConnected) return;
    window.removeEventListener("resize", fit);
    gone.disconnect();
  });
  gone.observe(frame.parentNode, { childList: true });
}

/** The marked lines scrolled to: centred below the page's head when they fit, else from their
 * first line. */
function scrollToPassage(body) {
  const marked = body.querySelectorAll(".cited");
  if (!marked.length) return;
  const head = $("document-head").getBoundingClientRect().height + PASSAGE_MARGIN_PX;
  const top = marked[0].getBoundingClientRect().top + window.scrollY;
  const height = marked[marked.length - 1].getBoundingClientRect().bottom + window.scrollY - top;
  const room = window.innerHeight - head;
  const lead = height < room ? (room - height) / 2 : 0;
  window.scrollTo({ top: Math.max(0, top - head - lead), behavior: "instant" });
}

/** The text's lines, numbered from 1, the lines `cited` to `end` marked (a window around them
 * when the file is huge). */
function numberedLines(text, cited, end) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  let first = 1;
  let last = lines.length;
  if (lines.length > MAX_LINES_SHOWN) {
    first = Math.max(1, (cited || 1) - LINES_AROUND);
    last = Math.min(lines.length, Math.max(first + 2 * LINES_AROUND, (end || 0) + LINES_AROUND));
  }
  const items = [];
  for (let n = first; n <= last; n++) {
    const marked = cited !== null && n >= cited && n <= end;
    const edges = [marked ? "cited" : null, n === cited ? "cited-first" : null, n === end ? "cited-last" : null];
    items.push(
      el(
        "li",
        { className: edges.filter(Boolean).join(" ") || null, attrs: { id: `L${n}`, value: n } },
        el("span", { className: "line-text" }, lines[n - 1] || "\u200b")
      )
    );
  }
  const list = el("ol", { className: "lines", attrs: { start: first, "aria-label": "Lines" } }, items);
  if (first === 1 && last === lines.length) return list;
  return [
    el("p", { className: "muted" }, `Lines ${first}–${last} of ${lines.length}, around the cited line.`),
    list,
  ];
}

/* A result's document, opened at its place: the Document page (#/document?…) shows a text or
 * Markdown file with its lines numbered and the cited line marked and scrolled to, and an HTML
 * page in a sandboxed frame (no script, no access to this page); a PDF opens in the browser's
 * own viewer at the cited page, a Word file is downloaded.
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

/** The service's address of a document's file. */
export function documentUrl(base, source, path) {
  const parts = [base, source, ...path.split("/")].map(encodeURIComponent);
  return `/v1/bases/${parts[0]}/documents/${parts.slice(1).join("/")}`;
}

/** The link from a result to its document at its page or line; null for a note (no file). */
export function documentLink(base, citation, label) {
  if (!base || !citation || citation.kind === "note") return null;
  const { source, document, page, line } = citation;
  if (SHOWN_HERE.has(citation.kind)) {
    const params = new URLSearchParams({ base, source, path: document });
    if (line) params.set("line", String(line));
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

/** The Document page for #/document?base=…&source=…&path=…&line=N. */
export async function showDocumentPage(query) {
  const params = new URLSearchParams(query);
  const base = params.get("base") || "";
  const source = params.get("source") || "";
  const path = params.get("path") || "";
  const line = parseInt(params.get("line"), 10) || null;
  const kind = (path.split(".").pop() || "").toLowerCase();
  $("document-heading").textContent = `${source}/${path}`;
  $("document-meta").textContent = [base, line ? `line ${line}` : null].filter(Boolean).join(" · ");
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
    // sandbox="": no script, no form, a unique origin: the page is shown, never run.
    const frame = el("iframe", { className: "document-frame", attrs: { sandbox: "", title: path } });
    frame.srcdoc = text;
    body.replaceChildren(frame);
    return;
  }
  body.replaceChildren(...[numberedLines(text, line)].flat());
  const marked = body.querySelector(".cited");
  if (marked) marked.scrollIntoView({ block: "center" });
}

/** The text's lines, numbered from 1 (a window around the cited line when the file is huge). */
function numberedLines(text, cited) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  let first = 1;
  let last = lines.length;
  if (lines.length > MAX_LINES_SHOWN) {
    first = Math.max(1, (cited || 1) - LINES_AROUND);
    last = Math.min(lines.length, first + 2 * LINES_AROUND);
  }
  const items = [];
  for (let n = first; n <= last; n++) {
    items.push(
      el(
        "li",
        { className: n === cited ? "cited" : null, attrs: { id: `L${n}`, value: n } },
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

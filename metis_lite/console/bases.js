/* The service's bases: the form's pick lists (bases, sources, kinds) and the Bases page, each
 * base's state, its warnings (a model that cannot read its text), counts, models and searches
 * per day. */

import { api } from "./api.js";
import { $, el, moment, plural } from "./dom.js";

const KINDS = ["md", "txt", "html", "pdf", "docx", "epub", "odt", "pptx", "image"];
const DAYS_SHOWN = 14;
const DAY_MS = 86400000;

let bases = [];
let basesShown = null;

/** Read the bases from the service and refresh the form's pick lists. */
export async function loadBases() {
  const answer = await api("/v1/bases");
  bases = answer.bases || [];
  fillBaseOptions();
  return bases;
}

/** Whether any of the named bases has a reranker (the form's rerank box is shown only then). */
export function anyReranker(names) {
  return bases.some((base) => names.includes(base.name) && base.reranker);
}

/** The bases, the kinds or the sources ticked in the form. */
export function picked(group) {
  return [...document.querySelectorAll(`input[name="${group}"]:checked`)].map((i) => i.value);
}

export function setPicked(group, values) {
  for (const input of document.querySelectorAll(`input[name="${group}"]`)) {
    input.checked = values.includes(input.value);
  }
}

function checkboxChip(group, value, labelText, checked, detail) {
  const id = `${group}-${value}`.replace(/[^\w-]/g, "_");
  const input = el("input", { attrs: { type: "checkbox", id, name: group, value } });
  input.checked = checked;
  return el(
    "span",
    { className: "chip" },
    input,
    el("label", { attrs: { for: id } }, labelText, detail ? el("span", { className: "muted" }, ` ${detail}`) : null)
  );
}

/** Every base is ticked the first time; after that, what the person ticked is kept. */
function fillBaseOptions() {
  const before = new Set(picked("bases"));
  const first = document.querySelector('input[name="bases"]') === null;
  const box = $("bases-options");
  box.replaceChildren();
  if (!bases.length) box.append(el("span", { className: "muted" }, "This service has no base."));
  for (const base of bases) {
    const checked = first || before.has(base.name);
    box.append(checkboxChip("bases", base.name, base.name, checked, plural(base.chunks, "chunk", "chunks")));
  }
  const sourcesBefore = new Set(picked("sources"));
  const sources = [...new Set(bases.flatMap((b) => (b.sources || []).map((s) => s.name)))].sort();
  const sourceBox = $("sources-options");
  sourceBox.replaceChildren();
  if (!sources.length) sourceBox.append(el("span", { className: "muted" }, "none yet"));
  for (const name of sources) sourceBox.append(checkboxChip("sources", name, name, sourcesBefore.has(name)));
  fillKindOptions();
}

/** The kinds a base reads, and any other kind the bases hold (a memory's notes). */
export function fillKindOptions() {
  const before = new Set(picked("kinds"));
  const held = bases.flatMap((b) => Object.keys(b.kinds || {})).filter((k) => !KINDS.includes(k));
  const kinds = [...KINDS, ...new Set(held.sort())];
  $("kinds-options").replaceChildren(...kinds.map((kind) => checkboxChip("kinds", kind, kind, before.has(kind))));
}

/** The Bases page, read again from the service. */
export async function showBasesPage() {
  try {
    await loadBases();
    renderBases();
  } catch (error) {
    $("bases-meta").textContent = error.message;
    if (!bases.length) $("bases-list").replaceChildren();
  }
}

/** The cards again, only when something changed, keeping the focus where it was. */
function renderBases() {
  $("bases-meta").textContent = bases.length
    ? `${plural(bases.length, "base", "bases")} served here.`
    : "This service has no base.";
  const shown = JSON.stringify(bases);
  if (shown === basesShown) return;
  basesShown = shown;
  const focused = document.activeElement && document.activeElement.dataset.focusKey;
  $("bases-list").replaceChildren(...bases.map(baseCard));
  const again = focused && document.querySelector(`[data-focus-key="${CSS.escape(focused)}"]`);
  if (again) again.focus();
}

function fact(term, value, className) {
  return el("div", { className }, el("dt", {}, term), el("dd", {}, String(value)));
}

function baseCard(base) {
  const state = base.state === "Indexing" ? "Indexing" : "Waiting";
  const kinds = Object.entries(base.kinds || {})
    .map(([kind, n]) => `${kind} ${n}`)
    .join(" · ");
  const run = base.last_indexing;
  const without = base.chunks_without_vector;
  const sources = base.sources || [];
  return el(
    "article",
    { className: "base-card", attrs: { "aria-labelledby": `base-${base.name}` } },
    el(
      "header",
      { className: "base-head" },
      el("h2", { attrs: { id: `base-${base.name}` } }, base.name),
      el("span", { className: `state state-${state.toLowerCase()}` }, state),
      base.read_only
        ? el("span", { className: "state state-read-only", attrs: { title: readOnlyTitle(base) } }, "Read-only")
        : indexButton(base, state)
    ),
    el("p", { className: "muted path" }, `${base.kind} · ${base.path}`),
    baseWarnings(base.warnings || []),
    el(
      "dl",
      { className: "facts" },
      fact("Documents", base.documents),
      fact("Chunks", base.chunks),
      fact("Chunks without a vector", without, without ? "warn" : null),
      fact("Embedding model", base.embedding),
      fact("Reranker", base.reranker || "none"),
      fact("Chunk size", `${base.chunk_size} characters`)
    ),
    el("h3", {}, "Kinds"),
    el("p", {}, kinds || "no document yet"),
    el("h3", {}, "Sources"),
    sources.length
      ? el(
          "ul",
          { className: "sources" },
          sources.map((s) => el("li", {}, el("strong", {}, s.name), s.path ? ` ${s.path}` : " (notes)"))
        )
      : el("p", {}, "no source yet"),
    el("h3", {}, "Last indexing"),
    el("p", {}, run ? runText(run) : "never indexed"),
    el("h3", {}, "Searches per day"),
    searchesChart(base.searches_per_day || {})
  );
}

/** What searches by meaning of this base suffer, as the service wrote it (code and message). */
function baseWarnings(warnings) {
  if (!warnings.length) return null;
  return el(
    "ul",
    { className: "warnings" },
    warnings.map((w) =>
      el("li", { className: "warning", attrs: { "data-code": w.code } }, el("strong", {}, "Warning"), " ", w.message)
    )
  );
}

/** Why a read-only base has no "Index now": nothing is written to it, not even search counts. */
function readOnlyTitle(base) {
  const copy = base.published ? `a copy published ${moment(base.published.at)}` : "a base";
  return `${copy}, served read-only: it is searched, never indexed or written here`;
}

/** "Index now": the base reads its sources again (only what changed); 409 while it indexes. */
function indexButton(base, state) {
  const button = el(
    "button",
    { className: "quiet", attrs: { type: "button", "data-focus-key": `index-${base.name}` } },
    "Index now"
  );
  button.disabled = state === "Indexing";
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await api(`/v1/bases/${encodeURIComponent(base.name)}/index`, {});
      await showBasesPage();
    } catch (error) {
      $("bases-meta").textContent = `${base.name}: ${error.message}`;
      button.disabled = false;
    }
  });
  return button;
}

function runText(run) {
  const counts = ["added", "updated", "removed", "skipped"]
    .filter((k) => run[k] !== undefined && run[k] !== null)
    .map((k) => `${run[k]} ${k}`)
    .join(", ");
  const when = run.finished_at ? `finished ${moment(run.finished_at)}` : `started ${moment(run.started_at)}`;
  return `${run.state}, ${when}${counts ? `: ${counts}` : ""}`;
}

/** The last DAYS_SHOWN days (UTC days, as the base counts them), zeros included, as bars. */
function searchesChart(perDay) {
  const days = Object.keys(perDay).sort();
  const today = new Date().toISOString().slice(0, 10);
  const last = days.length && days[days.length - 1] > today ? days[days.length - 1] : today;
  const end = new Date(`${last}T00:00:00Z`).getTime();
  const shown = [];
  for (let i = DAYS_SHOWN - 1; i >= 0; i--) {
    const day = new Date(end - i * DAY_MS).toISOString().slice(0, 10);
    shown.push([day, perDay[day] || 0]);
  }
  const total = shown.reduce((sum, [, n]) => sum + n, 0);
  const most = Math.max(1, ...shown.map(([, n]) => n));
  const list = el(
    "ol",
    { className: "days", attrs: { "aria-label": `Searches in the last ${DAYS_SHOWN} days: ${total}` } },
    shown.map(([day, n]) => {
      const bar = el("span", { className: n ? "bar" : "bar zero" });
      bar.style.height = `${Math.round((n / most) * 100)}%`; // CSSOM, which the CSP allows
      return el(
        "li",
        { attrs: { title: `${day}: ${plural(n, "search", "searches")}` } },
        el("span", { className: "bar-box" }, bar),
        el("span", { className: "day-count" }, String(n)),
        el("span", { className: "day-date" }, day.slice(5))
      );
    })
  );
  return el(
    "div",
    { className: "searches" },
    el("p", { className: "muted" }, `${total} in the last ${DAYS_SHOWN} days`),
    list
  );
}

/* The metis-lite console: Search and Bases, over the service's own JSON API (/v1/...).
 *
 * Plain JavaScript modules, no build step, nothing fetched from elsewhere: it works with no
 * internet. The service sends `Content-Security-Policy: default-src 'self'`, so there is no
 * inline script or style. The address holds the page and the search (#/search?q=…), so a
 * search can be bookmarked, shared, and gone back to.
 *
 *   dom.js      building nodes, the question's words, number formats
 *   api.js      the JSON API, the token prompt, the unreachable-service banner
 *   bases.js    the form's pick lists and the Bases page
 *   results.js  one answer: warnings, timings, results
 *   compare.js  three answers side by side: Both, Meaning, Words, why it came up
 *   document.js a result's document at its cited passage (docs/console.md)
 */

import { ApiError, api } from "./api.js";
import { anyReranker, fillKindOptions, loadBases, picked, setPicked, showBasesPage } from "./bases.js";
import { COMPARE_MODES, showComparison } from "./compare.js";
import { showDocumentPage } from "./document.js";
import { $, el } from "./dom.js";
import { MODE_NAMES, revealAnswer, showAnswer, showError, showLoading } from "./results.js";

const TOP_K_DEFAULT = 10;
const TOP_K_MAX = 100;
const BASES_REFRESH_MS = 5000;

// -- The search form and its state in the address ---------------------------------------------

function formState() {
  const topK = Math.min(TOP_K_MAX, Math.max(1, parseInt($("top-k").value, 10) || TOP_K_DEFAULT));
  return {
    question: $("question").value.trim(),
    bases: picked("bases"),
    mode: $("mode").value,
    top_k: topK,
    rerank: $("rerank").checked,
    compare: $("compare").checked,
    path_prefix: $("prefix").value.trim(),
    kinds: picked("kinds"),
    sources: picked("sources"),
  };
}

function stateToHash(state) {
  const params = new URLSearchParams();
  params.set("q", state.question);
  params.set("bases", state.bases.join(","));
  params.set("mode", state.mode);
  params.set("k", String(state.top_k));
  if (!state.rerank) params.set("rerank", "0");
  if (state.compare) params.set("compare", "1");
  if (state.path_prefix) params.set("prefix", state.path_prefix);
  if (state.kinds.length) params.set("kinds", state.kinds.join(","));
  if (state.sources.length) params.set("sources", state.sources.join(","));
  return `#/search?${params}`;
}

function hashToForm(query) {
  const params = new URLSearchParams(query);
  const list = (name) => (params.get(name) || "").split(",").filter(Boolean);
  $("question").value = params.get("q") || "";
  if (params.has("bases")) setPicked("bases", list("bases"));
  $("mode").value = MODE_NAMES[params.get("mode")] ? params.get("mode") : "hybrid";
  $("top-k").value = params.get("k") || String(TOP_K_DEFAULT);
  $("rerank").checked = params.get("rerank") !== "0";
  $("compare").checked = params.get("compare") === "1";
  $("prefix").value = params.get("prefix") || "";
  setPicked("kinds", list("kinds"));
  setPicked("sources", list("sources"));
  if (params.get("prefix") || params.get("kinds") || params.get("sources")) $("filters").open = true;
  updateFormHints();
}

/** The filters in force, shown on the closed Filters line; the mode is moot while comparing;
 * the rerank box is there only when a ticked base has a reranker. */
function updateFormHints() {
  const state = formState();
  const active = [state.path_prefix, state.kinds.join(", "), state.sources.join(", ")].filter(Boolean);
  $("filters-summary").textContent = active.length ? `· ${active.join(" · ")}` : "";
  $("mode").disabled = state.compare;
  $("rerank-field").hidden = !anyReranker(state.bases);
}

function requestBody(state, mode) {
  const body = { question: state.question, mode, top_k: state.top_k, rerank: state.rerank };
  const filters = {};
  if (state.path_prefix) filters.path_prefix = state.path_prefix;
  if (state.kinds.length) filters.kinds = state.kinds;
  if (state.sources.length) filters.sources = state.sources;
  if (Object.keys(filters).length) body.filters = filters;
  return body;
}

/** One base: its own endpoint; several: /v1/search, whose results each carry their base. */
function ask(state, mode) {
  const body = requestBody(state, mode);
  if (state.bases.length === 1) return api(`/v1/bases/${encodeURIComponent(state.bases[0])}/search`, body);
  return api("/v1/search", { ...body, bases: state.bases });
}

// -- Searching ----------------------------------------------------------------------------------

let searchNumber = 0; // an answer that arrives after a newer search started is dropped
let retry = null; // what the unreachable banner's "Try again" does

async function runSearch(state) {
  const number = ++searchNumber;
  retry = () => runSearch(state);
  if (!state.question) {
    showError(new ApiError(400, "EMPTY_QUESTION", "type a question first"));
    $("question").focus();
    return;
  }
  if (!state.bases.length) {
    showError(new ApiError(400, "NO_BASE", "pick at least one base to search"));
    revealAnswer();
    return;
  }
  showLoading(state.compare);
  revealAnswer();
  if (state.compare) {
    const settled = await Promise.allSettled(COMPARE_MODES.map((mode) => ask(state, mode)));
    if (number === searchNumber) showComparison(settled, state);
  } else {
    try {
      const answer = await ask(state, state.mode);
      if (number === searchNumber) showAnswer(answer, state, stateToHash);
    } catch (error) {
      if (number === searchNumber) showError(error);
    }
  }
  if (number === searchNumber) revealAnswer();
}

function onSubmit(event) {
  event.preventDefault();
  const state = formState();
  const hash = stateToHash(state);
  lastSearchHash = hash;
  if (location.hash !== hash) history.pushState(null, "", hash);
  runSearch(state);
}

// -- Pages ------------------------------------------------------------------------------------

let lastSearchHash = null;
let basesTimer = null;

const VIEWS = { "/bases": "bases", "/document": "document" };

function parseHash() {
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  return { view: VIEWS[path] || "search", query };
}

async function route() {
  const { view, query } = parseHash();
  for (const name of ["search", "bases", "document"]) $(`view-${name}`).hidden = name !== view;
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const title = { bases: "Bases", document: "Document" }[view] || "Search";
  $("brand-page").textContent = title;
  document.title = `Metis → ${title}`;
  clearInterval(basesTimer);
  if (view === "bases") {
    retry = showBasesPage;
    basesTimer = setInterval(showBasesPage, BASES_REFRESH_MS); // Indexing / Waiting as it changes
    await showBasesPage();
    return;
  }
  if (view === "document") {
    retry = route;
    await showDocumentPage(query);
    return;
  }
  retry = () => loadBases().then(route);
  if (query && location.hash !== lastSearchHash) {
    lastSearchHash = location.hash;
    hashToForm(query);
    await runSearch(formState());
  }
}

/** "/" anywhere but in a field goes to the question, its text selected to type over. */
function slashFocusesTheQuestion(event) {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target.closest && target.closest("input, textarea, select, [contenteditable], dialog")) return;
  event.preventDefault();
  if (parseHash().view !== "search") location.hash = lastSearchHash || "#/search";
  $("question").focus();
  $("question").select();
}

async function start() {
  fillKindOptions();
  $("search-form").addEventListener("submit", onSubmit);
  $("search-form").addEventListener("change", updateFormHints);
  $("search-form").addEventListener("input", updateFormHints);
  $("service-retry").addEventListener("click", () => retry && retry());
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", slashFocusesTheQuestion);
  $("document-back").addEventListener("click", (event) => {
    event.preventDefault();
    if (history.length > 1) history.back();
    else location.hash = lastSearchHash || "#/search";
  });
  try {
    const health = await api("/v1/health");
    $("version").textContent = health.version || "";
    await loadBases();
    updateFormHints();
  } catch (error) {
    $("bases-options").replaceChildren(
      el("span", { className: "muted" }, `The bases could not be read: ${error.message}`)
    );
  }
  await route();
  const { view, query } = parseHash();
  if (view === "search" && !query) $("question").focus();
  document.documentElement.dataset.ready = "true"; // for people and tests: the page has started
}

window.addEventListener("error", (event) => showError(event.error || new Error(event.message)));
window.addEventListener("unhandledrejection", (event) =>
  showError(event.reason instanceof Error ? event.reason : new Error(String(event.reason)))
);
start();

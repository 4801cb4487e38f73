/* One answer on the Search page: its warnings above its results, its timings, and each result
 * with its snippet (the words the search matched marked), its citation and its score
 * line; the answer scrolled into view when the form leaves it below the fold. */

import { ApiError, Unreachable } from "./api.js";
import { documentLink } from "./document.js";
import { $, el, highlighted, marksOf, ms, plural, scoreLine, unwrapped, where } from "./dom.js";

export const MODE_NAMES = { hybrid: "hybrid", dense: "by meaning only", keyword: "by words only" };
const SKELETON_RESULTS = 3;
const TIMINGS = [
  ["embed", "embed"],
  ["dense", "meaning"],
  ["keyword", "words"],
  ["fuse", "fuse"],
  ["rerank", "rerank"],
];
const NOT_EMBEDDED = ["NO_VECTORS", "EMBEDDING_MODEL_UNAVAILABLE"];
const REVEAL_PX = 240; // of an answer's first warning or result, in view: its title and first lines

/** The steps an answer's search ran (as the CLI's summary line names them). */
function stepsRun(answer) {
  const codes = new Set((answer.warnings || []).map((w) => w.code));
  const embedded = answer.mode !== "keyword" && !NOT_EMBEDDED.some((code) => codes.has(code));
  return {
    embed: embedded,
    dense: embedded,
    keyword: answer.mode !== "dense",
    fuse: answer.mode === "hybrid",
    rerank: Boolean(answer.reranked) || codes.has("RERANKER_UNAVAILABLE"),
  };
}

/** Placeholders the size of results while an answer is on its way, so nothing jumps. */
export function showLoading(compare) {
  $("answer").setAttribute("aria-busy", "true");
  $("answer-meta").textContent = compare ? "Asking three ways…" : "Searching…";
  $("answer-error").hidden = true;
  $("warnings").hidden = true;
  $("compare-view").hidden = true;
  const skeletons = [];
  for (let i = 0; i < SKELETON_RESULTS; i++) {
    skeletons.push(
      el(
        "li",
        { className: "result skeleton", attrs: { "aria-hidden": "true" } },
        el("span", { className: "line title" }),
        el("span", { className: "line short" }),
        el("span", { className: "line" }),
        el("span", { className: "line" }),
        el("span", { className: "line short" })
      )
    );
  }
  $("results").replaceChildren(...skeletons);
}

export function doneLoading() {
  $("answer").removeAttribute("aria-busy");
}

/** The answer scrolled to when less than REVEAL_PX of its first warning, error or result is in
 * the window (a phone, or the Filters open, leave it below the fold) or when the answer starts
 * above the window: a search is seen to answer. */
export function revealAnswer() {
  const answer = $("answer");
  const first = [$("warnings"), $("answer-error"), $("results").firstElementChild, $("compare-view")].find(
    (node) => node && !node.hidden
  );
  const top = answer.getBoundingClientRect().top;
  const shown = first ? first.getBoundingClientRect().top : top;
  if (top < 0 || shown > window.innerHeight - REVEAL_PX) answer.scrollIntoView({ block: "start" });
}

/** A refused search (its message and code, plainly), an unreachable service, or a page bug. */
export function showError(error) {
  doneLoading();
  $("results").replaceChildren();
  $("compare-view").hidden = true;
  $("warnings").hidden = true;
  $("answer-meta").textContent = "";
  const box = $("answer-error");
  box.replaceChildren();
  if (error instanceof ApiError) {
    box.append(
      el("strong", {}, "The search was refused: "),
      error.message,
      el("span", { className: "code" }, ` (${error.code})`)
    );
  } else if (error instanceof Unreachable) {
    box.append(error.message);
  } else {
    box.append(`Something went wrong in the page: ${error.message}`);
  }
  box.hidden = false;
}

/** Each warning as the service wrote it, labelled with its mode (compare) and its base. */
export function showWarnings(items) {
  const list = $("warnings");
  list.replaceChildren(
    ...items.map(({ label, message, code }) =>
      el(
        "li",
        { className: "warning", attrs: { "data-code": code || null } },
        el("strong", {}, "Warning"),
        " ",
        label ? `${label}: ` : "",
        message
      )
    )
  );
  list.hidden = items.length === 0;
}

/** Each warning once labelled: a message that already starts with its base's name loses it. */
export function warningItems(answer, mode) {
  return (answer.warnings || []).map((w) => ({
    code: w.code,
    message: w.base && w.message.startsWith(`${w.base}: `) ? w.message.slice(w.base.length + 2) : w.message,
    label: [mode, w.base].filter(Boolean).join(" · "),
  }));
}

function tookList(answer) {
  const took = answer.took || {};
  const ran = stepsRun(answer);
  const parts = TIMINGS.filter(([key]) => ran[key]).map(([key, name]) =>
    el("span", { className: "took-part" }, `${name} ${ms(took[key])}`)
  );
  return el(
    "span",
    { className: "took" },
    `took ${ms(took.total)}`,
    parts.length ? " " : null,
    parts.length ? el("span", { className: "muted" }, "(", parts.flatMap((p, i) => (i ? [" · ", p] : [p])), ")") : null
  );
}

/** Source/document (a link to it at its page or line), kind, page or line, "OCR" when its
 * text was read from an image, the base when several are asked; the headings. */
export function citationNodes(result, multiBase, baseName) {
  const c = result.citation;
  const place = where(c);
  const label = `${c.source}/${c.document}`;
  const origin = el(
    "p",
    { className: "citation" },
    multiBase && result.base ? el("span", { className: "badge" }, result.base) : null,
    documentLink(result.base || baseName, c, label, result.text) || el("span", { className: "doc" }, label),
    el("span", { className: "kind" }, c.kind),
    place ? el("span", { className: "place" }, place) : null,
    c.ocr ? el("span", { className: "ocr", attrs: { title: "read from an image of the page by OCR" } }, "OCR") : null
  );
  const headings = (c.headings || []).length
    ? el("ol", { className: "crumbs", attrs: { "aria-label": "Headings" } }, c.headings.map((h) => el("li", {}, h)))
    : null;
  return [origin, headings];
}

/** The other places of the result's text (one result per text): each a link to its document
 * at its page or line, with its base when several are asked. */
export function alsoIn(result, multiBase, baseName) {
  const places = result.also_in || [];
  if (!places.length) return null;
  return el(
    "p",
    { className: "also-in" },
    "Also in ",
    places.flatMap((p, i) => {
      const c = p.citation;
      const label = `${c.source}/${c.document}` + (where(c) ? ` (${where(c)})` : "");
      const base = p.base || result.base || baseName;
      const link = documentLink(base, c, label, "") || el("span", { className: "doc" }, label);
      const named = multiBase && p.base ? [el("span", { className: "badge" }, p.base), " ", link] : [link];
      return i ? [", ", ...named] : named;
    })
  );
}

function resultItem(result, n, multiBase, baseName, mode) {
  const title = result.citation.title || result.citation.document;
  const words = marksOf(result);
  return el(
    "li",
    { className: "result" },
    el(
      "article",
      { attrs: { "aria-label": `Result ${n}: ${title}` } },
      el(
        "header",
        { className: "result-head" },
        el("span", { className: "rank", attrs: { "aria-hidden": "true" } }, String(n)),
        el("h2", { className: "result-title" }, title)
      ),
      citationNodes(result, multiBase, baseName),
      alsoIn(result, multiBase, baseName),
      el("p", { className: "text" }, highlighted(result.citation.snippet || result.text, words)),
      el(
        "details",
        { className: "passage-text" },
        el("summary", {}, "Whole passage"),
        el("p", { className: "text whole" }, highlighted(unwrapped(result.text), words))
      ),
      el("p", { className: "scores" }, scoreLine(result.scores || {}, mode))
    )
  );
}

export function showAnswer(answer, state, hashFor) {
  doneLoading();
  const results = answer.results || [];
  const multiBase = state.bases.length > 1;
  $("answer-meta").replaceChildren(
    el("strong", {}, results.length ? plural(results.length, "result", "results") : "No result"),
    ` · ${MODE_NAMES[answer.mode] || answer.mode}`,
    answer.reranked ? " · reranked" : " · not reranked",
    " · ",
    tookList(answer)
  );
  showWarnings(warningItems(answer, null));
  const items = results.map((r, i) => resultItem(r, i + 1, multiBase, state.bases[0], answer.mode));
  $("results").replaceChildren(...(items.length ? items : [noResultHint(answer, state, hashFor)]));
}

/** What to try when nothing was found: the filters in force, another mode, other words. */
function noResultHint(answer, state, hashFor) {
  const filters = [
    state.path_prefix ? `folder ${state.path_prefix}` : null,
    state.kinds.length ? `kinds ${state.kinds.join(", ")}` : null,
    state.sources.length ? `sources ${state.sources.join(", ")}` : null,
  ].filter(Boolean);
  const tries = [];
  if (filters.length) {
    tries.push(
      el("li", {}, `Filters in force: ${filters.join("; ")}. `, tryLink(hashFor, state, { path_prefix: "", kinds: [], sources: [] }, "Search without them"))
    );
  }
  for (const mode of ["hybrid", "dense", "keyword"].filter((m) => m !== answer.mode)) {
    tries.push(el("li", {}, tryLink(hashFor, state, { mode }, `Search ${MODE_NAMES[mode]}`)));
  }
  tries.push(el("li", {}, "Other words: a synonym, fewer words, or the term a document would use."));
  return el(
    "li",
    { className: "no-result" },
    el("p", {}, el("strong", {}, "Nothing was found"), ` for “${state.question}”. Try:`),
    el("ul", {}, tries)
  );
}

function tryLink(hashFor, state, change, label) {
  return el("a", { attrs: { href: hashFor({ ...state, ...change, compare: false }) } }, label);
}

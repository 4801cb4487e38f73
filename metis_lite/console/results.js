/* One answer on the Search page: its warnings above its results, its timings, and each result
 * with its snippet (the question's words marked), its citation and the spec's score line. */

import { ApiError, Unreachable } from "./api.js";
import { $, el, highlighted, ms, plural, scoreLine, unwrapped, where, wordsOf } from "./dom.js";

export const MODE_NAMES = { hybrid: "hybrid", dense: "by meaning only", keyword: "by words only" };
const SKELETON_RESULTS = 3;
const TIMINGS = [
  ["embed", "embed"],
  ["dense", "meaning"],
  ["keyword", "words"],
  ["fuse", "fuse"],
  ["rerank", "rerank"],
];

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

export function warningItems(answer, mode) {
  return (answer.warnings || []).map((w) => ({
    code: w.code,
    message: w.message,
    label: [mode, w.base].filter(Boolean).join(" · "),
  }));
}

function tookList(took) {
  const parts = TIMINGS.map(([key, name]) => el("span", { className: "took-part" }, `${name} ${ms(took[key])}`));
  return el(
    "span",
    { className: "took" },
    `took ${ms(took.total)} `,
    el("span", { className: "muted" }, "(", parts.flatMap((p, i) => (i ? [" · ", p] : [p])), ")")
  );
}

/** Source/document, kind, page or line (and the base when several are asked); the headings. */
export function citationNodes(result, multiBase) {
  const c = result.citation;
  const place = where(c);
  const origin = el(
    "p",
    { className: "citation" },
    multiBase && result.base ? el("span", { className: "badge" }, result.base) : null,
    el("span", { className: "doc" }, `${c.source}/${c.document}`),
    el("span", { className: "kind" }, c.kind),
    place ? el("span", { className: "place" }, place) : null
  );
  const headings = (c.headings || []).length
    ? el("ol", { className: "crumbs", attrs: { "aria-label": "Headings" } }, c.headings.map((h) => el("li", {}, h)))
    : null;
  return [origin, headings];
}

function resultItem(result, n, words, multiBase) {
  const title = result.citation.title || result.citation.document;
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
      citationNodes(result, multiBase),
      el("p", { className: "text" }, highlighted(result.citation.snippet || result.text, words)),
      el(
        "details",
        { className: "passage-text" },
        el("summary", {}, "Whole passage"),
        el("p", { className: "text whole" }, highlighted(unwrapped(result.text), words))
      ),
      el("p", { className: "scores" }, scoreLine(result.scores || {}))
    )
  );
}

export function showAnswer(answer, state) {
  doneLoading();
  const words = new Set(wordsOf(state.question));
  const results = answer.results || [];
  const multiBase = state.bases.length > 1;
  $("answer-meta").replaceChildren(
    el("strong", {}, results.length ? plural(results.length, "result", "results") : "No result"),
    ` · ${MODE_NAMES[answer.mode] || answer.mode}`,
    answer.reranked ? " · reranked" : " · not reranked",
    " · ",
    tookList(answer.took || {})
  );
  showWarnings(warningItems(answer, null));
  $("results").replaceChildren(...results.map((r, i) => resultItem(r, i + 1, words, multiBase)));
}

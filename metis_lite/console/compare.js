/* "Compare by meaning, by words, both": one question asked three ways, every passage any mode
 * found listed once (a passage is its base, its document and its text) with its rank in each
 * mode — Both, Meaning, Words — and why it came up, in docs/console.md's words. */

import { Unreachable } from "./api.js";
import { $, el, highlighted, marksOf, ms, plural } from "./dom.js";
import { citationNodes, doneLoading, MODE_NAMES, showError, showWarnings, warningItems } from "./results.js";
import { NEAR_THE_TOP, why } from "./why.js";

export const COMPARE_MODES = ["hybrid", "dense", "keyword"];
const COLUMN_NAMES = { hybrid: "Both", dense: "Meaning", keyword: "Words" };
const NO_MEANING_CODES = new Set(["EMBEDDING_MODEL_UNAVAILABLE", "NO_VECTORS"]);
const AFTER_HYBRID = 1000; // passages hybrid did not return come after all it did

/** Why a passage came up (why.js, the rules evaluation/why.py states too), from the ranks each
 * retriever gave it — the hybrid answer's own dense_rank and keyword_rank where it has them,
 * else the single-mode answers' — and from the question's words it holds. */
export function whyItCameUp(entry, meaningSearched) {
  const both = entry.found.hybrid;
  const meaning = entry.found.dense;
  const words = entry.found.keyword;
  const pick = (...values) => values.find((v) => v !== undefined && v !== null);
  const m = pick(both && both.result.scores.dense_rank, meaning && meaning.result.scores.dense_rank, meaning && meaning.rank);
  const w = pick(both && both.result.scores.keyword_rank, words && words.result.scores.keyword_rank, words && words.rank);
  const rerank = pick(both && both.result.scores.rerank, meaning && meaning.result.scores.rerank, words && words.result.scores.rerank);
  return why(m, w, entry.result.words, meaningSearched, rerank);
}

function bestRank(entry) {
  if (entry.found.hybrid) return entry.found.hybrid.rank;
  return AFTER_HYBRID + Math.min(...Object.values(entry.found).map((f) => f.rank));
}

/** The passages of the three answers, each once, in hybrid's order then the others'. */
function passages(answers, state) {
  const entries = new Map();
  for (const mode of COMPARE_MODES) {
    (answers[mode] ? answers[mode].results : []).forEach((result, i) => {
      const key = [result.base || state.bases[0], result.citation.document, result.text].join("\u0000");
      if (!entries.has(key)) entries.set(key, { result, found: {} });
      entries.get(key).found[mode] = { rank: i + 1, result };
    });
  }
  return [...entries.values()].sort((a, b) => bestRank(a) - bestRank(b));
}

function rankCell(entry, mode) {
  const found = entry.found[mode];
  const attrs = { "data-label": COLUMN_NAMES[mode] };
  if (found) return el("td", { className: "num", attrs }, `#${found.rank}`);
  return el("td", { className: "num none", attrs }, el("span", { attrs: { "aria-label": "not found" } }, "—"));
}

/** `settled`: Promise.allSettled over COMPARE_MODES' answers. A mode that was refused (by
 * meaning without its model: 503) becomes a warning; the other two are still compared. */
export function showComparison(settled, state) {
  doneLoading();
  const answers = {};
  const failures = [];
  COMPARE_MODES.forEach((mode, i) => {
    if (settled[i].status === "fulfilled") answers[mode] = settled[i].value;
    else failures.push([mode, settled[i].reason]);
  });
  const unreachable = failures.find(([, error]) => error instanceof Unreachable);
  if (unreachable || !Object.keys(answers).length) {
    showError((unreachable || failures[0])[1]);
    return;
  }
  const warnings = COMPARE_MODES.filter((mode) => answers[mode]).flatMap((mode) => warningItems(answers[mode], MODE_NAMES[mode]));
  for (const [mode, error] of failures) {
    warnings.push({ code: error.code, label: MODE_NAMES[mode], message: `not searched: ${error.message}` });
  }
  showWarnings(warnings);

  const hybrid = answers.hybrid;
  const meaningSearched =
    Boolean(answers.dense) || Boolean(hybrid && !(hybrid.warnings || []).some((w) => NO_MEANING_CODES.has(w.code)));
  const rows = passages(answers, state);
  $("answer-meta").replaceChildren(
    el("strong", {}, plural(rows.length, "passage", "passages")),
    " found by any mode · ",
    COMPARE_MODES.map((mode) => {
      const a = answers[mode];
      return a
        ? `${MODE_NAMES[mode]}: ${plural(a.results.length, "result", "results")} in ${ms(a.took && a.took.total)}`
        : `${MODE_NAMES[mode]}: not searched`;
    }).join(" · ")
  );
  $("results").replaceChildren();

  const multiBase = state.bases.length > 1;
  const table = el(
    "table",
    { className: "compare-table" },
    el(
      "caption",
      {},
      "Every passage any mode found, with its rank in each",
      el(
        "span",
        { className: "muted caption-note" },
        `A rank is the passage's place in that mode's results; why it came up gives its rank by meaning and by words before fusion and reranking, and the question's words it holds. Near the top: among the first ${NEAR_THE_TOP} of a list; a common word: held by a quarter of the base's passages or more.`
      )
    ),
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        el("th", { attrs: { scope: "col" } }, "Passage"),
        COMPARE_MODES.map((mode) => el("th", { className: "num", attrs: { scope: "col" } }, COLUMN_NAMES[mode])),
        el("th", { attrs: { scope: "col" } }, "Why it came up")
      )
    ),
    el(
      "tbody",
      {},
      rows.map((entry) =>
        el(
          "tr",
          {},
          el(
            "td",
            { className: "passage" },
            el("p", { className: "result-title" }, entry.result.citation.title || entry.result.citation.document),
            citationNodes(entry.result, multiBase, state.bases[0]),
            el("p", { className: "text snippet" }, highlighted(entry.result.citation.snippet || entry.result.text, marksOf(entry.result)))
          ),
          COMPARE_MODES.map((mode) => rankCell(entry, mode)),
          el("td", { className: "why", attrs: { "data-label": "Why it came up" } }, whyItCameUp(entry, meaningSearched))
        )
      )
    )
  );
  const view = $("compare-view");
  view.replaceChildren(rows.length ? table : el("p", {}, "No mode found a passage."));
  view.hidden = false;
}

/* Why a passage came up, in words: metis_lite/evaluation/why.py written in JavaScript, rule for
 * rule (the `eval` report says it by that module; tests/test_eval.py runs both over one table of
 * cases and checks they agree). No imports: it is the rule alone. */

/** A list placed a passage near the top when it ranked it among its first NEAR_THE_TOP: the
 * results a search shows unless asked for more. Lower, a list agreed only weakly. */
export const NEAR_THE_TOP = 10;

const quoted = (words) => words.map((w) => `“${w}”`).join(", ");
const near = (rank) => rank !== undefined && rank !== null && rank <= NEAR_THE_TOP;

/** Why a passage came up from its rank by meaning `m` and by words `w` (undefined or null: not
 * in that list), the question's `words` it holds (a result's `words`), whether the search by
 * meaning ran, and the reranker's score: "both agree" only when both lists placed it near the
 * top; "it names a term of the question exactly" only when a word it holds is not common in its
 * base. */
export function why(m, w, words, meaningSearched = true, rerank = null) {
  const hasM = m !== undefined && m !== null;
  const hasW = w !== undefined && w !== null;
  const held = (words || []).filter((x) => x.exact);
  const terms = held.filter((x) => !x.common).map((x) => x.word);
  const common = held.filter((x) => x.common).map((x) => x.word);
  const close = hasM ? `close in meaning (#${m})` : null;
  const ranked = hasW ? `shares words (#${w})` : null;
  const listed = ranked && held.length ? `shares words (#${w}: ${quoted(terms.length ? terms : common)})` : ranked;
  let text;
  if (near(m) && near(w)) {
    text = `${close} and ${ranked} — both agree`;
  } else if (near(w)) {
    const apart = hasM ? `further in meaning (#${m})` : "not among the closest in meaning";
    if (!meaningSearched && !hasM) {
      text = `${listed}; meaning could not be searched — the embedding model did not answer`;
    } else if (terms.length) {
      text = `${listed}; ${apart} — it names a term of the question exactly`;
    } else {
      text = `${listed}; ${apart} — the words it shares are common in the base`;
    }
  } else if (near(m)) {
    text = `${close}; ${ranked ? `${listed}, further down` : "its words do not match"} — it says the same thing in other words`;
  } else if (close || ranked) {
    text = `${[close, listed].filter(Boolean).join(" and ")}; neither list placed it among its first ${NEAR_THE_TOP}`;
  } else {
    text = "found by the fused ranking";
  }
  if (rerank !== undefined && rerank !== null) text += `; the reranker scored it ${rerank.toFixed(3)}`;
  return text;
}

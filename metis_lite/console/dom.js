/* DOM building, the words a result's text is marked at, and the few number formats shown.
 *
 * No text from a base is ever parsed as HTML: every node is made here with DOM calls and
 * filled with text nodes; a highlighted word is a <mark> element made the same way.
 */

export const $ = (id) => document.getElementById(id);

/** An element with a class, attributes and children (strings and numbers become text). */
export function el(tag, options = {}, ...children) {
  const node = document.createElement(tag);
  if (options.className) node.className = options.className;
  for (const [name, value] of Object.entries(options.attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

// -- Words, as the words index reads them (mirrors metis_lite/text/tokenizer.py, word rules 2) -----
//
// A word is a run of letters and digits with the marks written on them, compared folded. Runs of
// scripts written without spaces (Han, Kana, Hangul, Thai, Lao, Khmer, Myanmar) are cut into
// overlapping bigrams of letters (with their marks), a lone letter of them kept: 东京的天气 →
// 东京 京的 的天 天气. A mark covers the letters of each bigram among the words to mark.

const WORD = /[\p{L}\p{N}][\p{L}\p{M}\p{N}]*/gu;
const LETTER = /[\p{L}\p{N}]\p{M}*/gu;
const BIGRAMMED =
  /^[\p{sc=Han}\p{sc=Hiragana}\p{sc=Katakana}\p{sc=Hangul}\p{sc=Thai}\p{sc=Lao}\p{sc=Khmer}\p{sc=Myanmar}]/u;
const MARKS = /\p{M}+/gu;
const FOLD_TABLE = { "ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "ı": "i" };
const FOLD_CHARS = new RegExp(`[${Object.keys(FOLD_TABLE).join("")}]`, "gu");

/** Lower case with accents folded: "Configuração" → "configuracao". */
export function fold(text) {
  return text
    .toLowerCase()
    .normalize("NFKD")
    .toLowerCase()
    .replace(FOLD_CHARS, (c) => FOLD_TABLE[c])
    .replace(MARKS, "");
}

/** One letter alone is left out, one digit kept ("step 2"). */
function keep(word) {
  return word.length > 1 || /^\p{N}$/u.test(word);
}

/** A run's letters (each with its marks) in groups: those of bigrammed scripts apart. */
function groups(run) {
  const found = [];
  for (const m of run.matchAll(LETTER)) {
    const letter = { start: m.index, end: m.index + m[0].length, text: m[0] };
    const bigrammed = BIGRAMMED.test(m[0]);
    const last = found[found.length - 1];
    if (last && last.bigrammed === bigrammed) last.letters.push(letter);
    else found.push({ bigrammed, letters: [letter] });
  }
  return found;
}

/** A group's words: the folded word, or its bigrams (a lone letter stays itself). */
function groupWords(group) {
  const texts = group.letters.map((l) => l.text);
  if (!group.bigrammed) return (fold(texts.join("")).match(/[\p{L}\p{N}]+/gu) || []).filter(keep);
  if (texts.length === 1) return [fold(texts[0])];
  return texts.slice(1).map((text, i) => fold(texts[i] + text));
}

/** What to mark in a result: the forms its text holds of the question's words that are not
 * common in its base (the answer's `words`: "gets" for "get"; not "do", held by a quarter of
 * the chunks or more). */
export function marksOf(result) {
  return new Set((result.words || []).filter((w) => !w.common).flatMap((w) => w.forms));
}

/** Which letters of a group the question's words cover. */
function covered(group, words) {
  const letters = group.letters;
  if (!group.bigrammed || letters.length === 1) {
    return letters.map(() => groupWords(group).some((w) => words.has(w)));
  }
  const hit = letters.map(() => false);
  for (let i = 0; i + 1 < letters.length; i++) {
    if (words.has(fold(letters[i].text + letters[i + 1].text))) hit[i] = hit[i + 1] = true;
  }
  return hit;
}

/** The text with what the question's words match (compared folded) wrapped in <mark>. */
export function highlighted(text, words) {
  const out = document.createDocumentFragment();
  let at = 0;
  for (const match of text.matchAll(WORD)) {
    for (const group of groups(match[0])) {
      const hit = covered(group, words);
      for (let i = 0; i < hit.length; i++) {
        if (!hit[i]) continue;
        let j = i;
        while (j + 1 < hit.length && hit[j + 1]) j++;
        const start = match.index + group.letters[i].start;
        const end = match.index + group.letters[j].end;
        if (start > at) out.append(text.slice(at, start));
        out.append(el("mark", {}, text.slice(start, end)));
        at = end;
        i = j;
      }
    }
  }
  if (at < text.length) out.append(text.slice(at));
  return out;
}

/** Text with its soft line wraps joined (a line break before a lower-case word), so it reflows
 * to the window; paragraphs, list items and table rows keep their own lines. */
export function unwrapped(text) {
  return text.replace(/(\S)[ \t]*\n[ \t]*(?=\p{Ll})/gu, "$1 ");
}

// -- Numbers and places ---------------------------------------------------------------------

/** The score line (docs/how-search-works.md):
 * meaning 0.830 (#1) · words 7.41 (#2) · fused 0.0328 · reranker 0.970,
 * with only the parts that apply (a score that does not apply is absent from the answer, and a
 * search by one way only fused nothing). */
export function scoreLine(scores, mode = "hybrid") {
  const parts = [];
  if (scores.dense !== undefined) parts.push(`meaning ${scores.dense.toFixed(3)} (#${scores.dense_rank})`);
  if (scores.keyword !== undefined) parts.push(`words ${scores.keyword.toFixed(2)} (#${scores.keyword_rank})`);
  if (scores.fused !== undefined && mode === "hybrid") parts.push(`fused ${scores.fused.toFixed(4)}`);
  if (scores.rerank !== undefined) parts.push(`reranker ${scores.rerank.toFixed(3)}`);
  return parts.join(" · ");
}

export function ms(value) {
  return `${(value || 0).toFixed(1)} ms`;
}

/** "page 3" (PDF), "slide 3" (PowerPoint) or "line 12" (text, Markdown), or null when the
 * citation has neither. */
export function where(citation) {
  if (citation.page) return `${citation.kind === "pptx" ? "slide" : "page"} ${citation.page}`;
  if (citation.line) return `line ${citation.line}`;
  return null;
}

export function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

/** "2026-12-02T16:16:59Z" → "2026-12-02 16:16 UTC" (a base records its times in UTC). */
export function moment(iso) {
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})/.exec(iso || "");
  return match ? `${match[1]} ${match[2]} UTC` : String(iso);
}

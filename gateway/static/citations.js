// A reply's citations as the page shows them: pure functions over the API's data.
//
// A citation is {number, document_id, page, chunk_id, text, filename}: `number` is the [n] the
// reply is shown with, `text` the span of the page it quoted. The `done` event carries them while
// the reply streams; the stored message carries them (and `retrieval.note`) once it is read back.

/** The reply's citations, one per number, in number order. */
export function citationsOf(message) {
  const byNumber = new Map();
  for (const c of message.citations || []) if (!byNumber.has(c.number)) byNumber.set(c.number, c);
  return [...byNumber.values()].sort((a, b) => a.number - b.number);
}

/** Splits a reply's text around what may be citation markers: "[2]", "[report.pdf p.3]", "[p.3]" (a capturing split). */
export const MARKERS = /(\[(?:\d{1,3}|[^[\]\n]{0,120}?p\.?\s*\d{1,5})\])/i;

/**
 * The citation `token` (one piece of a MARKERS split) stands for, or null: [n] by its number; a
 * page label, as the server reads those the model writes, by page and (when it names one) file.
 */
export function markerCitation(token, citations) {
  const number = /^\[(\d{1,3})\]$/.exec(token);
  if (number) return citations.find((c) => c.number === Number(number[1])) ?? null;
  const label = /^\[([^[\]\n]{0,120}?)\s*p\.?\s*(\d{1,5})\]$/i.exec(token);
  if (!label) return null;
  const name = label[1].trim().toLowerCase();
  const page = Number(label[2]);
  return citations.find((c) => c.page === page && (!name || name === (c.filename || "").toLowerCase())) ?? null;
}

/** "report.pdf p.3" */
export const citationLabel = (c) => `${c.filename || "document"} p.${c.page}`;

/** What the turn's documents covered, e.g. "report.pdf: pages 1–12 of 150 indexed; …"; "" when nothing to say. */
export const documentsNote = (message) => message.documents_note || message.retrieval?.note || "";

/** The reply had documents and quoted none of them. */
export const uncited = (message) => message.citation_status === "uncited";

/**
 * Where `quote` is in `text`: [start, end) character offsets, or null. Exact first; then ignoring
 * case and runs of whitespace (extraction and chunking may re-space a line); then the longest
 * leading run of the quote's words that is there (a chunk may run on past the page's end).
 */
export function locate(text, quote) {
  const trimmed = (quote || "").trim();
  if (!trimmed) return null;
  const exact = text.indexOf(trimmed);
  if (exact >= 0) return [exact, exact + trimmed.length];

  const { folded, origin } = fold(text);
  const find = (words) => {
    const at = folded.indexOf(words.join(" "));
    if (at < 0) return null;
    const last = at + words.join(" ").length - 1;
    return [origin[at], origin[last] + 1];
  };
  const words = fold(trimmed).folded.split(" ").filter(Boolean);
  const whole = find(words);
  if (whole) return whole;
  // Whether a prefix of k words is found only gets likelier as k shrinks: search for the longest.
  const MIN_WORDS = 4;
  let lo = MIN_WORDS - 1; // the longest prefix known to be found (none yet)
  let hi = words.length - 1; // the longest that may be
  let best = null;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    const found = find(words.slice(0, mid));
    if (found) {
      best = found;
      lo = mid;
    } else hi = mid - 1;
  }
  return best;
}

/** `text` lower-cased with each run of whitespace one space; `origin[i]`: where folded char i came from. */
function fold(text) {
  let folded = "";
  const origin = [];
  let space = true; // drops leading whitespace
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (/\s/.test(c)) {
      if (!space) {
        folded += " ";
        origin.push(i);
      }
      space = true;
    } else {
      const lower = c.toLowerCase();
      // A few characters lower-case to two (İ): keep the offsets one to one.
      folded += lower.length === 1 ? lower : c;
      origin.push(i);
      space = false;
    }
  }
  return { folded, origin };
}

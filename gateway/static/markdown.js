// A small, safe Markdown renderer for replies.
//
// Safety comes from the order of work: the whole source is HTML-escaped first,
// and only then is a limited subset turned into tags this module writes itself
// (paragraphs, headings, lists, fenced code, inline code, bold, italic, and
// links whose target is http or https). No character of the source can open a
// tag or an attribute. Unclosed constructs (a fence still streaming) render as
// far as they go.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const FENCE = /^\s{0,3}```\s*([A-Za-z0-9_+-]*)\s*$/;
const LIST_ITEM = /^\s{0,3}(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const HOLE = /\u0000(\d+)\u0000/g; // placeholders for spans already rendered

/** HTML for `source` (a string of Markdown, untrusted). */
export function renderMarkdown(source) {
  const lines = escapeHtml(source.replace(/\u0000/g, "").replace(/\r\n?/g, "\n")).split("\n");
  const out = [];
  let paragraph = [];
  let list = null; // {ordered, items: [string]}

  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${inline(paragraph.join("\n")).replace(/\n/g, "<br>")}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (!list) return;
    const tag = list.ordered ? "ol" : "ul";
    out.push(`<${tag}>${list.items.map((item) => `<li>${inline(item)}</li>`).join("")}</${tag}>`);
    list = null;
  };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flushParagraph();
      flushList();
      const code = [];
      for (i++; i < lines.length && !/^\s{0,3}```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      const lang = fence[1] ? ` class="language-${fence[1]}"` : "";
      out.push(`<pre><code${lang}>${code.join("\n")}</code></pre>`);
      continue;
    }
    if (line.trim() === "") {
      flushParagraph();
      flushList();
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flushParagraph();
      flushList();
      const level = Math.min(6, heading[1].length + 2); // the page's own h1/h2 stay above replies
      out.push(`<h${level}>${inline(heading[2])}</h${level}>`);
      continue;
    }
    const item = LIST_ITEM.exec(line);
    if (item) {
      flushParagraph();
      const ordered = item[2] !== undefined;
      if (list && list.ordered !== ordered) flushList();
      if (!list) list = { ordered, items: [] };
      list.items.push(item[3]);
      continue;
    }
    if (list && /^\s+\S/.test(line)) {
      list.items[list.items.length - 1] += " " + line.trim(); // an item's continuation line
      continue;
    }
    flushList();
    paragraph.push(line);
  }
  flushParagraph();
  flushList();
  return out.join("");
}

/** Inline spans of already-escaped text: code, links, bold, italic. */
function inline(text) {
  const holes = [];
  const hold = (html) => `\u0000${holes.push(html) - 1}\u0000`;
  let s = text.replace(/`([^`\n]+)`/g, (_, code) => hold(`<code>${code}</code>`));
  s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()]+)\)/g, (_, label, url) =>
    hold(`<a href="${url}" rel="noopener noreferrer nofollow" target="_blank">${emphasis(label)}</a>`),
  );
  s = emphasis(s);
  return s.replace(HOLE, (_, n) => holes[Number(n)]);
}

function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([^*\n]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([^_\n]*?\S)__(?=[^\w]|$)/g, "$1<strong>$2</strong>")
    .replace(/\*(?=\S)([^*\n]*?\S)\*/g, "<em>$1</em>")
    .replace(/(^|[^\w])_(?=\S)([^_\n]*?\S)_(?=[^\w]|$)/g, "$1<em>$2</em>");
}

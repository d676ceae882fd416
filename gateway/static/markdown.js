// A reply's Markdown as DOM: markdown-it parses it, DOMPurify sanitises the result (both vendored
// from npm, unmodified: vendor/README.md).
//
// Two locks, each enough alone. markdown-it runs with raw HTML off, so no character of the source
// opens a tag or an attribute it did not write itself, and a link or autolink keeps its target only
// when that is http, https or mailto (otherwise it stays text). DOMPurify then keeps only the tags
// and attributes listed below, working on an inert document, and hands back a DocumentFragment: the
// page never parses an HTML string of the reply's. An unclosed construct (a fence still streaming)
// renders as far as it goes.

import markdownit from "./vendor/markdown-it.esm.min.mjs";
import DOMPurify from "./vendor/purify.es.mjs";

/** The only link targets a reply may have. */
const LINK = /^(?:https?:\/\/|mailto:)/i;

const md = markdownit({ html: false, linkify: false, breaks: true, typographer: false });
// An image would be fetched from wherever the model says (the CSP blocks it anyway): `![alt](url)`
// shows as "!" and a link, as any other text would.
md.disable("image");
md.validateLink = (url) => LINK.test(url);
md.core.ruler.push("parley_page", shapeForThePage);

const PURIFY = {
  ALLOWED_TAGS: [
    "p", "br", "strong", "em", "s", "code", "pre", "a", "ul", "ol", "li", "blockquote", "hr",
    "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
  ],
  ALLOWED_ATTR: ["href", "title", "target", "rel", "class", "start"],
  // DOMPurify checks every attribute not named URI-safe against this pattern, so the ones that are
  // never URLs are named: what is left to check is href.
  ALLOWED_URI_REGEXP: LINK,
  ADD_URI_SAFE_ATTR: ["target", "rel", "start"],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

/** A DocumentFragment for `source` (a string of Markdown, untrusted). */
export function renderMarkdown(source) {
  return sanitize(md.render(source));
}

/** The second lock alone (exported for its tests): `html` as a fragment of the tags and attributes above. */
export function sanitize(html) {
  return DOMPurify.sanitize(html, PURIFY);
}

/**
 * What the page needs of markdown-it's tokens: headings two levels down (the page's own h1 and h2
 * stay above replies), a table column's alignment as a class (a style attribute would break the
 * CSP), and links that open apart from the page and tell the other site nothing.
 */
function shapeForThePage(state) {
  for (const token of state.tokens) {
    if (token.type === "heading_open" || token.type === "heading_close") {
      token.tag = `h${Math.min(6, Number(token.tag.slice(1)) + 2)}`;
    } else if (token.type === "th_open" || token.type === "td_open") {
      const align = /^text-align:(left|center|right)$/.exec(token.attrGet("style") || "")?.[1];
      token.attrs = align ? [["class", `align-${align}`]] : null;
    }
    for (const child of token.children || []) {
      if (child.type !== "link_open") continue;
      child.attrSet("target", "_blank");
      child.attrSet("rel", "noopener noreferrer nofollow");
    }
  }
}

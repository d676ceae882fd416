// DOM for the conversation list and the thread. Plain elements and textContent; a reply's
// Markdown arrives as a sanitised DocumentFragment (markdown.js). No HTML string is parsed here.
// Buttons carry data-action and data-id; app.js handles them by delegation.

import { citationLabel, citationsOf, documentsNote, locate, markerCitation, MARKERS, uncited } from "./citations.js";
import { statusOf, statusText } from "./documents.js";
import { renderMarkdown } from "./markdown.js";
import { modelLabel } from "./models.js";
import { ANSWERED_TEXT, decisionText, isLong, PHASE_TEXT, phaseOf, prettyArguments, UNKNOWN_NOTICE } from "./toolcalls.js";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value == null) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.filter((c) => c != null));
  return node;
}

const button = (action, id, label, attrs = {}) =>
  el("button", { type: "button", "data-action": action, "data-id": id, class: "link", ...attrs }, label);

/** The sidebar's items. `ctx`: {activeId, renaming (id), menuFor (id), archived (the archived list is shown)}. */
export function conversationList(conversations, ctx) {
  if (!conversations.length) return [el("li", { class: "muted", text: ctx.archived ? "No archived chats" : "No chats yet" })];
  return conversations.map((c) => conversationItem(c, ctx));
}

function conversationItem(c, ctx) {
  const title = c.title || "Untitled chat";
  const item = el("li", { class: "conv", "data-id": c.id });
  if (ctx.renaming === c.id) {
    const id = `rename-${c.id}`;
    item.append(
      el(
        "form",
        { class: "rename", "data-id": c.id },
        el("label", { for: id, class: "visually-hidden", text: `New title for ${title}` }),
        el("input", { id, name: "title", value: c.title || "", maxlength: 200, autocomplete: "off", required: true }),
        el("button", { type: "submit", class: "link" }, "Save"),
        button("rename-cancel", c.id, "Cancel"),
      ),
    );
    return item;
  }
  const open = ctx.menuFor === c.id;
  item.append(
    el(
      "div",
      { class: "conv-row" },
      el("a", { href: `#/c/${encodeURIComponent(c.id)}`, "aria-current": c.id === ctx.activeId ? "page" : null }, title),
      button("menu", c.id, "…", { class: "link conv-menu-button", "aria-label": `Options for ${title}`, "aria-expanded": String(open) }),
    ),
  );
  if (open) {
    item.append(
      el(
        "div",
        { class: "conv-menu", role: "group", "aria-label": `Options for ${title}` },
        button("rename", c.id, "Rename", { "aria-label": `Rename ${title}` }),
        ctx.archived
          ? button("unarchive", c.id, "Unarchive", { "aria-label": `Unarchive ${title}` })
          : button("archive", c.id, "Archive", { "aria-label": `Archive ${title}` }),
        // Plain links: a GET on the session cookie, saved by the browser under the server's file name.
        el("a", { href: `/v1/conversations/${encodeURIComponent(c.id)}/export?format=markdown`, download: "", class: "link", "aria-label": `Export ${title} as Markdown` }, "Markdown"),
        el("a", { href: `/v1/conversations/${encodeURIComponent(c.id)}/export`, download: "", class: "link", "aria-label": `Export ${title} as JSON` }, "JSON"),
        button("share", c.id, "Share", { "aria-label": `Share ${title}`, title: "A read-only link to the selected branch" }),
        button("unshare", c.id, "Stop sharing", { "aria-label": `Stop sharing ${title}` }),
        button("delete", c.id, "Delete", { "aria-label": `Delete ${title}`, class: "link danger-link" }),
        ctx.shared?.id === c.id
          ? el("input", { class: "share-link", readonly: "", value: ctx.shared.url, "aria-label": `Link to ${title}` })
          : null,
      ),
    );
  }
  return item;
}

const STATUS_LABEL = {
  streaming: "Writing…",
  cancelled: "Stopped",
  failed: "Failed",
  rejected: "Not answered",
  filtered: "Withheld by moderation",
};

/**
 * One message of the path. `ctx`: {siblings, editing, busy, documents (the names of the documents
 * a user message brought to the chat), tools (the cards of a reply's tool calls: toolCallsView)}.
 */
export function messageView(m, ctx) {
  const user = m.role === "user";
  const article = el("article", {
    class: `msg msg-${user ? "user" : "assistant"}`,
    "data-id": m.id,
    "data-status": m.status || "complete",
    "aria-label": user ? "You" : "Assistant",
  });
  article.append(el("h3", { class: "visually-hidden", text: user ? "You said:" : "Assistant said:" }));

  if (ctx.editing) {
    article.append(editForm(m));
  } else {
    const body = el("div", { class: user ? "body body-plain" : "body md" });
    if (!user) body.setAttribute("aria-live", "polite"); // read out once aria-busy turns false
    fillBody(body, m);
    article.append(body);
  }

  if (user && ctx.documents?.length) article.append(broughtDocuments(ctx.documents));
  if (ctx.tools) article.append(ctx.tools);
  if (!user && m.status !== "streaming") article.append(...sources(m));

  if (!user && (m.restarted || m.attempt > 0)) {
    // Kept once the reply ends: the text after the cut was written by another worker.
    article.append(el("p", { class: "note note-restarted", role: "note", text: "Restarted on another worker" }));
  }

  const meta = el("div", { class: "meta" });
  if (ctx.siblings.length > 1) meta.append(switcher(m, ctx.siblings, ctx.busy));
  const label = STATUS_LABEL[m.status];
  if (label) meta.append(el("span", { class: `status status-${m.status}`, text: label }));
  const info = !user && m.status !== "streaming" ? replyInfo(m) : "";
  if (info) meta.append(el("span", { class: "reply-info", title: m.model || null, text: info }));
  if (!user && m.status !== "streaming" && m.status !== "filtered" && m.content && !ctx.editing) {
    meta.append(button("copy", m.id, "Copy", { "aria-label": "Copy this reply" }));
  }
  if (!user && m.status !== "streaming" && !ctx.editing) meta.append(...ratingButtons(m));
  if (!ctx.editing && !ctx.busy) {
    if (user) meta.append(button("edit", m.id, "Edit", { "aria-label": "Edit this message" }));
    else if (m.status !== "streaming") meta.append(button("regenerate", m.id, "Regenerate", { "aria-label": "Regenerate this reply" }));
  }
  if (meta.childElementCount) article.append(meta);
  return article;
}

/** Thumbs up and down on a finished reply, pressed as the reply's stored rating says (m.feedback). */
function ratingButtons(m) {
  const rating = m.feedback?.rating;
  return [
    ["up", "\u{1F44D}", "Good reply"],
    ["down", "\u{1F44E}", "Bad reply"],
  ].map(([value, glyph, label]) =>
    button(`rate-${value}`, m.id, glyph, { "aria-label": label, "aria-pressed": rating === value ? "true" : "false", class: "link rate" }),
  );
}

/** "SmolLM2-135M-Instruct · 8 tokens": who answered and how long the answer was, as far as known. */
export function replyInfo(m) {
  const parts = [];
  if (m.model) parts.push(modelLabel(m.model));
  if (m.tokens > 0) parts.push(`${m.tokens} ${m.tokens === 1 ? "token" : "tokens"}`);
  return parts.join(" · ");
}

/** (Re)writes a message body: plain text for the user, rendered Markdown for replies. */
export function fillBody(body, m) {
  if (m.role === "user") {
    body.textContent = m.content;
    return;
  }
  const streaming = m.status === "streaming";
  body.setAttribute("aria-busy", String(streaming));
  if (m.status === "filtered") {
    // Never the withdrawn text: the notice, and which categories were flagged when the page knows.
    const cats = m.moderation?.categories?.length ? ` (${m.moderation.categories.join(", ")})` : "";
    body.replaceChildren(el("p", { class: "notice notice-filtered", role: "note", text: (m.content || "This reply was withheld.") + cats }));
    return;
  }
  body.replaceChildren(renderMarkdown(m.content || ""));
  for (const pre of body.querySelectorAll("pre")) frameCode(pre);
  if (m.citations?.length) markCitations(body, m);
  if (streaming) lastBlock(body).append(el("span", { class: "cursor", "aria-hidden": "true" }));
}

/** Where the streaming cursor goes: the end of the last block, not a line of its own. */
function lastBlock(body) {
  let last = body;
  for (;;) {
    let child = last.lastChild;
    // Skip the line breaks markdown-it writes between blocks.
    while (child?.nodeType === Node.TEXT_NODE && !child.data.trim()) child = child.previousSibling;
    if (child?.nodeType !== Node.ELEMENT_NODE || child.tagName === "BR" || child.tagName === "HR") return last;
    last = child;
  }
}

/** A code block's box: its language (when the fence named one) and a button that copies the code. */
function frameCode(pre) {
  const lang = /(?:^|\s)language-(\S+)/.exec(pre.querySelector("code")?.className || "")?.[1] || "";
  const head = el(
    "div",
    { class: "code-head" },
    el("span", { class: "code-lang", text: lang || "code" }),
    button("copy-code", null, "Copy code", { "aria-label": lang ? `Copy the ${lang} code` : "Copy the code" }),
  );
  const box = el("div", { class: "code-block" });
  pre.replaceWith(box);
  box.append(head, pre);
}

// ------------------------------------------------------------------ documents and citations

const citeButton = (m, c, text, cls) =>
  button("cite", m.id, text, { class: cls, "data-number": c.number, title: `Open page ${c.page} of ${c.filename || "the document"}` });

/** Under a finished reply: its numbered sources, or the note that it cited none, and what the documents covered. */
function sources(m) {
  const parts = [];
  const cited = citationsOf(m);
  if (cited.length) {
    parts.push(
      el(
        "div",
        { class: "sources", role: "group", "aria-label": "Sources" },
        el("ol", {}, ...cited.map((c) => el("li", {}, citeButton(m, c, `[${c.number}] ${citationLabel(c)}`, "link cite")))),
      ),
    );
  } else if (uncited(m)) {
    parts.push(el("p", { class: "note note-uncited", role: "note", text: "No passage of the attached documents was cited" }));
  }
  const note = documentsNote(m);
  if (note) parts.push(el("p", { class: "note note-documents", role: "note", text: note }));
  return parts;
}

/** The markers a reply writes for its citations ([1], [report.pdf p.3]) made buttons that open the page; never in code. */
function markCitations(body, m) {
  const cited = citationsOf(m);
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement.closest("code, a, button") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const nodes = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) if (node.data.includes("[")) nodes.push(node);
  for (const node of nodes) {
    const parts = node.data.split(MARKERS).map((p) => ({ p, c: markerCitation(p, cited) }));
    if (parts.some(({ c }) => c)) node.replaceWith(...parts.map(({ p, c }) => (c ? citeButton(m, c, p, "link cite-marker") : p)));
  }
}

/** Under a user message: the documents it brought to the chat. */
function broughtDocuments(names) {
  return el(
    "ul",
    { class: "asked-about", "aria-label": "Documents attached to this message" },
    ...names.map((name) => el("li", { class: "doc-tag", text: name })),
  );
}

/** The composer's chips: each document of the chat with its name, status and a remove button. */
export function attachmentList(items) {
  return items.map((item) => {
    const status = statusOf(item);
    const chip = el(
      "li",
      { class: "chip", "data-key": item.key, "data-status": status },
      el("span", { class: "chip-name", text: item.filename }),
      el("span", { class: "chip-status", text: statusText(item) }),
    );
    if (status === "uploading") {
      const { sent = 0, total = 0 } = item.progress || {};
      chip.append(el("progress", { max: total || 1, value: sent, "aria-label": `Uploading ${item.filename}` }));
    }
    const label = item.doc ? `Delete ${item.filename}` : `Dismiss ${item.filename}`;
    chip.append(button("remove-document", item.key, "×", { class: "link icon", "aria-label": label, title: label }));
    return chip;
  });
}

/** The side panel's content: the cited page's text, the quoted span marked (and shown apart when not found in it). */
export function pageView(page, citation) {
  const text = page.text || "";
  const span = locate(text, citation?.text);
  const parts = [];
  if (citation?.text && !span) {
    parts.push(el("p", { class: "muted", text: "The quoted passage:" }), el("blockquote", { class: "quote", text: citation.text }));
  }
  const body = el("div", { class: "page-text", tabindex: "0", "aria-label": `Text of page ${page.page}` });
  if (span) {
    const [start, end] = span;
    body.append(text.slice(0, start), el("mark", { class: "quoted", text: text.slice(start, end) }), text.slice(end));
  } else body.textContent = text || "(This page has no text.)";
  parts.push(body);
  if (page.method === "ocr") parts.push(el("p", { class: "muted page-method", text: "This page was scanned: its text was read by OCR." }));
  return parts;
}

// ------------------------------------------------------------------ Parley's tools

/**
 * The cards of a reply's tool calls (toolcalls.js callsOf): each call's tool, arguments, the permission
 * check's decision and rule, its state, and once it has ended its outcome and result. A call that waits
 * for the owner has Approve, Edit and Reject. `ctx`: {answered (call id → the answer just sent),
 * editing (the call id whose arguments are being edited), draft (that edit's text, if it was sent)}.
 */
export function toolCallsView(calls, ctx) {
  return el("div", { class: "tool-calls", role: "group", "aria-label": "Tool calls" }, ...calls.map((call) => toolCard(call, ctx)));
}

function toolCard(call, ctx) {
  const row = call.row;
  const phase = phaseOf(row);
  const answered = phase === "asked" ? ctx.answered.get(call.id) : null;
  const card = el("section", {
    class: "tool-call",
    "data-call-id": call.id,
    "data-phase": phase,
    "data-state": row?.state ?? "pending",
    "data-outcome": row?.outcome ?? null,
    "aria-label": `Tool call: ${call.name}`,
  });
  card.append(
    el(
      "div",
      { class: "tool-head" },
      el("code", { class: "tool-name", text: call.name }),
      el("span", { class: `tool-phase phase-${phase}`, text: answered ? ANSWERED_TEXT[answered] : PHASE_TEXT[phase] }),
    ),
  );
  if (row) card.append(el("p", { class: "tool-decision", text: decisionText(row) }));
  if (row?.reason) card.append(el("p", { class: "tool-reason", text: row.reason }));
  // The row's arguments: an edit's once the owner changed them, else the model's.
  card.append(el("div", { class: "tool-label", text: "Arguments" }), el("pre", { class: "tool-args", text: prettyArguments(row?.arguments ?? call.arguments) }));
  if (phase === "unknown") card.append(el("p", { class: "notice tool-unknown", role: "note", text: UNKNOWN_NOTICE }));
  if (row?.state === "finished") card.append(...toolResult(row));
  if (phase === "asked" && !answered) card.append(ctx.editing === call.id ? argumentsForm(call, row, ctx.draft) : approval(call));
  return card;
}

function toolResult(row) {
  const parts = [];
  if (row.error && row.error !== row.outcome) parts.push(el("p", { class: "tool-error", text: row.error }));
  const text = row.result ?? "";
  if (!text) return parts;
  const pre = el("pre", { class: "tool-result", text });
  if (isLong(text)) {
    const lines = text.split("\n").length;
    const summary = `Result (${lines > 1 ? `${lines} lines` : `${text.length} characters`})`;
    parts.push(el("details", { class: "tool-result-box" }, el("summary", { text: summary }), pre));
  } else parts.push(el("div", { class: "tool-label", text: "Result" }), pre);
  return parts;
}

function approval(call) {
  return el(
    "div",
    { class: "tool-approval", role: "group", "aria-label": `Approve or reject ${call.name}` },
    el("p", { class: "tool-question", text: "This call runs only once you approve it." }),
    button("tool-approve", call.id, "Approve", { class: "primary", "aria-label": `Approve ${call.name}` }),
    button("tool-edit", call.id, "Edit", { class: null, "aria-label": `Edit the arguments of ${call.name}` }),
    button("tool-reject", call.id, "Reject", { class: "danger", "aria-label": `Reject ${call.name}` }),
  );
}

function argumentsForm(call, row, draft) {
  const id = `tool-args-${call.id}`;
  const text = draft ?? prettyArguments(row?.arguments ?? call.arguments);
  return el(
    "form",
    { class: "tool-edit", "data-call-id": call.id, novalidate: true },
    el("label", { for: id, text: `Arguments of ${call.name}, as a JSON object` }),
    el("textarea", { id, name: "arguments", rows: Math.min(12, text.split("\n").length + 1), spellcheck: "false", "aria-describedby": `${id}-error` }, text),
    el("p", { id: `${id}-error`, class: "form-error", role: "alert" }),
    el(
      "div",
      { class: "edit-actions" },
      el("button", { type: "submit", class: "primary" }, "Run with these arguments"),
      button("tool-edit-cancel", call.id, "Cancel"),
    ),
  );
}

function switcher(m, siblings, busy) {
  const index = siblings.findIndex((s) => s.id === m.id);
  const prev = siblings[index - 1];
  const next = siblings[index + 1];
  return el(
    "span",
    { class: "switcher", role: "group", "aria-label": "Versions" },
    button("switch", prev?.id, "‹", { "aria-label": "Previous version", disabled: !prev || busy, class: "icon" }),
    el("span", { class: "position", text: `${index + 1}/${siblings.length}` }),
    button("switch", next?.id, "›", { "aria-label": "Next version", disabled: !next || busy, class: "icon" }),
  );
}

function editForm(m) {
  const id = `edit-${m.id}`;
  return el(
    "form",
    { class: "edit", "data-id": m.id },
    el("label", { for: id, class: "visually-hidden", text: "Edit your message" }),
    el("textarea", { id, name: "content", rows: 3, required: true }, m.content),
    el(
      "div",
      { class: "edit-actions" },
      el("button", { type: "submit", class: "primary" }, "Save and send"),
      button("edit-cancel", m.id, "Cancel"),
    ),
  );
}

export function emptyThread() {
  return el(
    "div",
    { class: "empty" },
    el("p", { text: "Ask anything. Replies stream in as they are written." }),
    el("p", { class: "muted", text: "Enter sends, Shift+Enter starts a new line." }),
  );
}

/** The error banner: message, and a Retry button when `retry` is set. */
export function errorView(error) {
  const parts = [el("span", { text: error.message })];
  if (error.retryAfter) parts.push(el("span", { text: ` Try again in about ${Math.ceil(error.retryAfter)} s.` }));
  if (error.retry) parts.push(button("retry", null, "Retry", { class: "primary" }));
  parts.push(button("dismiss", null, "Dismiss"));
  return parts;
}

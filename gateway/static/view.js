// DOM for the conversation list and the thread. Plain elements and textContent;
// the only HTML string is the Markdown renderer's, which escapes its input first.
// Buttons carry data-action and data-id; app.js handles them by delegation.

import { renderMarkdown } from "./markdown.js";

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

export function conversationList(conversations, activeId) {
  if (!conversations.length) return [el("li", { class: "muted", text: "No chats yet" })];
  return conversations.map((c) =>
    el(
      "li",
      {},
      el("a", { href: `#/c/${encodeURIComponent(c.id)}`, "aria-current": c.id === activeId ? "page" : null }, c.title || "Untitled chat"),
    ),
  );
}

const STATUS_LABEL = {
  streaming: "Writing…",
  cancelled: "Stopped",
  failed: "Failed",
  rejected: "Not answered",
};

/** One message of the path. `ctx`: {siblings, streaming (this is the live reply), editing, busy}. */
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

  const meta = el("div", { class: "meta" });
  if (ctx.siblings.length > 1) meta.append(switcher(m, ctx.siblings, ctx.busy));
  const label = m.restarted && m.status === "streaming" ? "Resumed on another worker…" : STATUS_LABEL[m.status];
  if (label) meta.append(el("span", { class: `status status-${m.status}`, text: label }));
  if (!ctx.editing && !ctx.busy) {
    if (user) meta.append(button("edit", m.id, "Edit", { "aria-label": "Edit this message" }));
    else if (m.status !== "streaming") meta.append(button("regenerate", m.id, "Regenerate", { "aria-label": "Regenerate this reply" }));
  }
  if (meta.childElementCount) article.append(meta);
  return article;
}

/** (Re)writes a message body: plain text for the user, rendered Markdown for replies. */
export function fillBody(body, m) {
  if (m.role === "user") {
    body.textContent = m.content;
    return;
  }
  const streaming = m.status === "streaming";
  body.setAttribute("aria-busy", String(streaming));
  body.innerHTML = renderMarkdown(m.content || "");
  if (streaming) {
    let last = body; // the cursor goes at the end of the last block, not on a line of its own
    while (last.lastChild?.nodeType === Node.ELEMENT_NODE && last.lastChild.tagName !== "BR") last = last.lastChild;
    last.append(el("span", { class: "cursor", "aria-hidden": "true" }));
  }
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

// The page a share link opens (/s/<secret>): the shared branch, read-only, for anyone holding the link,
// signed in or not (GET /v1/shares/<secret>). Replies render as on the chat page (markdown.js: sanitised,
// under the same Content-Security-Policy); the user's words stay plain text. "Continue" takes a signed-in
// visitor to the chat page, which forks the branch into their account (app.js, #/continue/<secret>).

import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const secret = decodeURIComponent(location.pathname.replace(/^\/s\//, ""));

function message(m) {
  const article = document.createElement("article");
  article.className = `msg msg-${m.role}`;
  const who = document.createElement("p");
  who.className = "who";
  who.textContent = m.role === "user" ? "Question" : m.model ? `Reply · ${m.model}` : "Reply";
  const body = document.createElement("div");
  body.className = m.role === "user" ? "body body-plain" : "body md";
  if (m.role === "user") body.textContent = m.content;
  else body.replaceChildren(renderMarkdown(m.content));
  article.append(who, body);
  return article;
}

async function show() {
  let response;
  try {
    response = await fetch(`/v1/shares/${encodeURIComponent(secret)}`, { credentials: "omit" });
  } catch {
    return fail("Parley could not be reached; try again shortly.");
  }
  if (!response.ok) {
    return fail(response.status === 404 ? "This link does not exist, or no longer works." : "This chat cannot be shown right now.");
  }
  const shared = await response.json();
  document.title = `${shared.title || "Shared chat"} · Parley`;
  $("shared-title").textContent = shared.title || "Shared chat";
  const when = shared.shared_at ? new Date(shared.shared_at).toLocaleDateString() : "";
  $("shared-note").textContent = `Shared ${when}, read-only${shared.expires_at ? `, until ${new Date(shared.expires_at).toLocaleDateString()}` : ""}.`;
  $("shared-thread").replaceChildren(...shared.messages.map(message));
  const go = $("shared-continue");
  go.href = `/#/continue/${encodeURIComponent(secret)}`;
  go.hidden = false;
}

function fail(text) {
  $("shared-title").textContent = "Shared chat";
  $("shared-error").textContent = text;
  $("shared-error").hidden = false;
}

show();

// The side panel a citation opens: the cited page's text (GET /v1/documents/{id}/pages/{n}),
// the span the reply quoted marked in it. A modal <dialog>: Escape or Close shuts it, and the
// focus goes back to the citation that opened it.

import { api, ApiError } from "./api.js";
import { pageView } from "./view.js";

const $ = (id) => document.getElementById(id);

let opener = null; // the button that opened the panel, focused again when it closes
let ticket = 0; // the latest opening: a slower answer for an earlier one is dropped

/** Opens the panel on `citation`'s page ({document_id, page, text, filename}), from button `from`. */
export async function openPage(citation, from) {
  const mine = ++ticket;
  opener = from;
  const dialog = $("page-panel");
  $("page-title").textContent = `${citation.filename || "Document"}, page ${citation.page}`;
  $("page-body").replaceChildren(loading(citation.page));
  if (!dialog.open) dialog.showModal();
  $("page-close").focus();
  let page;
  try {
    page = await api.documentPage(citation.document_id, citation.page);
  } catch (err) {
    if (mine !== ticket) return;
    const notReady = err instanceof ApiError && err.code === "page_not_ready";
    const message = notReady ? "This page is not indexed yet; try again in a moment." : err.message || "The page could not be read.";
    $("page-body").replaceChildren(Object.assign(document.createElement("p"), { className: "form-error", textContent: message }));
    return;
  }
  if (mine !== ticket || !dialog.open) return;
  $("page-body").replaceChildren(...pageView(page, citation));
  $("page-body").querySelector("mark")?.scrollIntoView({ block: "center" });
}

function loading(page) {
  return Object.assign(document.createElement("p"), { className: "muted", textContent: `Loading page ${page}…` });
}

export function setUpPanel() {
  const dialog = $("page-panel");
  $("page-close").addEventListener("click", () => dialog.close());
  // A click on the backdrop (the dialog element itself, outside its content) closes it too.
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close();
  });
  dialog.addEventListener("close", () => {
    ticket++;
    focusOpener();
    opener = null;
  });
}

/** The citation that opened the panel, or its successor when the thread was drawn again meanwhile. */
function focusOpener() {
  if (!opener) return;
  if (opener.isConnected) return opener.focus();
  const { id, number } = opener.dataset;
  const selector = `button[data-action="cite"][data-id="${CSS.escape(id || "")}"][data-number="${CSS.escape(number || "")}"]`;
  document.querySelector(selector)?.focus();
}

/** Shuts the panel (sign-out, another chat). */
export function closePanel() {
  const dialog = $("page-panel");
  if (dialog.open) dialog.close();
}

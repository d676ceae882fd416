// The sidebar's search box: the user's chats found as they type (GET /v1/search), each result's title and
// snippet set as text (never HTML: the page's CSP and the server's snippet are text alike), and a click
// that opens the chat on the found message's branch (app.js's `open`).

const $ = (id) => document.getElementById(id);

/** A pause in typing this long sends the query; a newer query cancels the one in flight. */
export const DEBOUNCE_MS = 200;
const LIMIT = 10;
const QUERY_MAX = 200;

let timer = null;
let controller = null; // the query in flight

function clear() {
  clearTimeout(timer);
  controller?.abort();
  controller = null; // an answer already on its way is not shown
  $("search-results").replaceChildren();
  $("search-results").hidden = true;
}

/** The box emptied and its results gone (signing out: the next user sees none of them). */
export function clearSearch() {
  $("search").value = "";
  clear();
}

/** `open(conversationId, messageId | null)`: show the chat with that message selected and in view. */
export function setUpSearch({ open }) {
  const box = $("search");
  const list = $("search-results");

  async function run() {
    const q = box.value.slice(0, QUERY_MAX);
    if (!q.trim()) return clear();
    controller?.abort();
    const mine = (controller = new AbortController());
    let results;
    try {
      const response = await fetch(`/v1/search?q=${encodeURIComponent(q)}&limit=${LIMIT}`, { signal: mine.signal });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      results = (await response.json()).results;
    } catch (err) {
      if (err.name === "AbortError") return;
      show([], "Search is unavailable right now.");
      return;
    }
    if (mine === controller) show(results, "No chats found.");
  }

  function show(results, empty) {
    const items = results.map((r) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "search-hit";
      button.dataset.conversation = r.conversation_id;
      if (r.message_id) button.dataset.message = r.message_id;
      const title = document.createElement("span");
      title.className = "search-title";
      title.textContent = r.title || "New chat";
      const snippet = document.createElement("span");
      snippet.className = "search-snippet";
      snippet.textContent = r.snippet;
      button.append(title, snippet);
      item.append(button);
      return item;
    });
    if (!items.length) {
      const none = document.createElement("li");
      none.className = "search-none";
      none.textContent = empty;
      items.push(none);
    }
    list.replaceChildren(...items);
    list.hidden = false;
  }

  box.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(run, DEBOUNCE_MS);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") clearSearch();
  });
  list.addEventListener("click", (event) => {
    const hit = event.target.closest("button.search-hit");
    if (hit) open(hit.dataset.conversation, hit.dataset.message ?? null);
  });
}

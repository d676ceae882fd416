// The Parley web client: sign-in (signin.js), the conversation list (rename, archive, delete),
// one conversation's selected branch, and the actions on it (send with the chosen
// model, stop, regenerate, edit, switch branch, copy), each reply streamed as SSE
// over fetch; the chat's documents (attach, their progress) and a reply's citations
// (open the cited page); the cards of Parley's tool calls under the reply that made them
// (approve, edit or reject a call that waits), read from the API while the page waits on
// one, and the tools a message offers (the composer's Tools field). State lives here and
// in documents.js's tray; the DOM is drawn by view.js from it.

import { api, auth, ApiError } from "./api.js";
import { citationsOf } from "./citations.js";
import { copyFrom, copyText } from "./clipboard.js";
import { statusText, Tray } from "./documents.js";
import { AUTO, choice, modelLabel, offeredModels } from "./models.js";
import { closePanel, openPage, setUpPanel } from "./panel.js";
import { cursors, follow, ReplyFailed, StreamCut } from "./replies.js";
import { clearSearch, setUpSearch } from "./search.js";
import { hideSignIn, setUpSignIn, showSignIn } from "./signin.js";
import { anyCalls, callsOf, parseArguments, waitingOn } from "./toolcalls.js";
import { FINISHED, newestLeaf, pathTo, siblingsOf } from "./tree.js";
import * as view from "./view.js";

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const state = {
  conversations: [],
  archived: false, // the sidebar lists the archived chats
  menuFor: null, // id of the chat whose options are open
  renaming: null, // id of the chat whose title is being edited
  models: [AUTO], // what the model picker offers
  provisional: new Map(), // chat id → the title shown until the server names the chat (its first line)
  shared: null, // {id, url}: the link just made for a chat, shown in its menu
  conv: null, // {id, title, leafId (shown), serverLeafId (as last read), messages: Map id → message, toolRows: Map call id → the server's call}
  active: null, // the streaming action: {controller, reply, stopping}
  error: null, // {message, retryAfter, retry}
  editing: null, // id of the user message being edited
  opening: null, // id of the chat being read to open it; a message sent meanwhile waits for it
  sendWhenOpen: false,
  toolAnswers: new Map(), // call id → the answer sent for it, until the server's row leaves `asked`
  toolEditing: null, // id of the call whose arguments are being edited
  toolDraft: null, // that edit's text once submitted (kept if sending it fails)
};
let openTicket = 0;
let titleTimers = [];

/** The open chat's documents; drawn by renderAttachments. */
const tray = new Tray({
  changed: () => renderAttachments(),
  settled: (item) => announce(`${item.filename}: ${statusText(item)}.`),
  failed: (err, retry) => fail(err, retry),
});

/** After a first reply the server names the chat, seconds later: the list is read again until it has. */
const TITLE_REFRESH_MS = [0, 2000, 5000, 10000, 20000, 40000];

function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16)); // crypto.randomUUID needs a secure context
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// ------------------------------------------------------------------ sign-in

/** Where a session that ended left off: whose it was and the chat open; the draft stays in its box. */
let interrupted = null;

/** The app for the signed-in user; after a session ended, back where they were if it is them again. */
function enter(session) {
  const resumed = interrupted?.userId === session.user_id;
  if (interrupted && !resumed) {
    $("input").value = ""; // someone else's draft
    history.replaceState(null, "", location.pathname);
  }
  interrupted = null;
  hideSignIn();
  render();
  loadConversations();
  loadModels();
  route();
  $("input").focus();
}

/** Back to a blank, signed-out page: what the last user saw is gone from it. */
function reset() {
  openTicket++; // a chat still being read is not opened for whoever signs in next
  state.active?.controller.abort();
  cursors.clear();
  for (const timer of titleTimers) clearTimeout(timer);
  tray.reset();
  closePanel();
  Object.assign(state, { conversations: [], archived: false, menuFor: null, renaming: null, models: [AUTO], provisional: new Map(), shared: null });
  Object.assign(state, { conv: null, active: null, error: null, editing: null, opening: null, sendWhenOpen: false });
  Object.assign(state, { toolAnswers: new Map(), toolEditing: null, toolDraft: null });
  stopToolPoll();
  $("tools").value = ""; // the next user's messages offer no tools they did not name
  clearSearch();
  $("tools-row").hidden = true;
  render();
}

async function signOut() {
  await auth.signOut();
  interrupted = null;
  choice.clear();
  $("input").value = "";
  history.replaceState(null, "", location.pathname);
  reset();
  showSignIn();
}

/** A 401: the session ended (idle, too old, signed out elsewhere). The draft and the open chat wait. */
function sessionEnded() {
  if (!auth.signedIn && interrupted) return; // another call already found out
  interrupted = { userId: auth.userId };
  auth.ended();
  reset();
  showSignIn("Your session has ended; sign in again to go on.");
}

// ------------------------------------------------------------------ loading

/** Reads the sidebar's list again; `quiet`: a background refresh, whose failure shows nothing. */
async function loadConversations({ quiet = false } = {}) {
  const archived = state.archived;
  try {
    const conversations = await api.conversations(archived);
    if (!auth.signedIn || state.archived !== archived) return; // signed out, or the other list asked for since
    state.conversations = conversations;
    const current = conversations.find((c) => c.id === state.conv?.id);
    if (current && current.title !== state.conv.title) state.conv.title = current.title;
    renderList();
    renderTitle();
  } catch (err) {
    if (!quiet) fail(err, loadConversations);
  }
}

/** Imports the file chosen (ChatGPT's export or Parley's), then lists the chats and opens the first one imported. */
async function importChosenFile() {
  const file = $("import-file").files[0];
  $("import-file").value = ""; // the same file may be chosen again
  if (!file) return;
  let result;
  try {
    result = await api.importChats(file);
  } catch (err) {
    fail(err);
    return;
  }
  announce(`${result.imported} chats imported, ${result.unchanged} already here.`);
  if (state.archived) toggleArchived();
  else await loadConversations();
  const first = result.conversations.find((c) => c.status === "imported") || result.conversations[0];
  if (first) location.hash = `#/c/${encodeURIComponent(first.id)}`;
}

/** Reads the list after a reply, then again a few times while chat `id` has no title of the server's. */
function refreshTitlesSoon(id) {
  for (const timer of titleTimers) clearTimeout(timer);
  const titled = () => !!state.conversations.find((c) => c.id === id)?.title;
  titleTimers = TITLE_REFRESH_MS.map((ms, i) =>
    setTimeout(() => {
      if (i === 0 || !titled()) loadConversations({ quiet: true });
    }, ms),
  );
}

/** What a chat is called on the page: the server's title, else the page's own until the server names it. */
const shownTitle = (c) => c?.title || state.provisional.get(c?.id) || "";

async function loadModels() {
  try {
    state.models = await offeredModels();
  } catch (err) {
    fail(err, loadModels);
    return;
  }
  renderComposer();
}

/** The model the next message asks for: the one chosen for this conversation (or for new chats). */
const chosenModel = () => choice.get(state.conv?.id, state.models);

function route() {
  const shared = /^#\/continue\/(.+)$/.exec(location.hash);
  if (shared) return continueShared(decodeURIComponent(shared[1]));
  const match = /^#\/c\/(.+)$/.exec(location.hash);
  const id = match ? decodeURIComponent(match[1]) : null;
  if (id && id === state.conv?.id) return;
  if (id) openConversation(id);
  else newChat();
}

function newChat() {
  openTicket++;
  state.active?.controller.abort();
  tray.reset();
  closePanel();
  Object.assign(state, { conv: null, active: null, error: null, editing: null, opening: null, sendWhenOpen: false });
  Object.assign(state, { toolAnswers: new Map(), toolEditing: null, toolDraft: null });
  stopToolPoll();
  render();
}

async function openConversation(id) {
  const ticket = ++openTicket;
  state.active?.controller.abort();
  closePanel();
  tray.open(id);
  Object.assign(state, { active: null, error: null, editing: null, opening: id });
  Object.assign(state, { toolAnswers: new Map(), toolEditing: null, toolDraft: null });
  stopToolPoll();
  let server;
  try {
    server = await api.conversation(id);
  } catch (err) {
    if (ticket === openTicket) {
      Object.assign(state, { opening: null, sendWhenOpen: false }); // the draft stays in the composer
      fail(err, () => openConversation(id));
    }
    return;
  }
  if (ticket !== openTicket) return;
  const sendNow = state.sendWhenOpen;
  Object.assign(state, { opening: null, sendWhenOpen: false });
  state.conv = { id, title: server.title, leafId: server.selected_leaf_id, serverLeafId: server.selected_leaf_id, messages: new Map(), toolRows: new Map() };
  merge(state.conv, server);
  render();
  const last = pathTo(state.conv.messages, state.conv.leafId).at(-1);
  if (last?.role === "assistant" && last.status === "streaming") stream(resumeAction(last));
  else if (sendNow) $("composer").requestSubmit();
  watchTools(state.conv);
}

/**
 * Takes the server's view, keeping what this page knows better: replies it streamed that are not
 * stored yet, that a worker restarted one (seen on its stream only), its token count until stored.
 */
function merge(conv, server) {
  const messages = new Map(server.messages.map((m) => [m.id, { ...m, content: m.content ?? "" }]));
  for (const [id, mine] of conv.messages) {
    const stored = messages.get(id);
    if (!stored || stored.status === "streaming") messages.set(id, mine); // not stored yet, or not finished there
    else {
      if (mine.restarted) stored.restarted = true;
      if (stored.tokens == null && mine.tokens != null) stored.tokens = mine.tokens;
      if (!stored.model && mine.model) stored.model = mine.model;
      for (const key of ["citations", "citation_status", "documents_note", "tool_calls"]) if (stored[key] == null && mine[key] != null) stored[key] = mine[key];
    }
  }
  conv.messages = messages;
  conv.title = server.title;
  conv.serverLeafId = server.selected_leaf_id;
}

/** After a reply ends: read the conversation until the store has the reply's outcome, then merge. */
async function settle(conv, replyId) {
  for (let attempt = 0; attempt < 20; attempt++) {
    let server;
    try {
      server = await api.conversation(conv.id);
    } catch {
      break; // the page keeps what it streamed
    }
    if (state.conv !== conv) return;
    const stored = server.messages.find((m) => m.id === replyId);
    if ((stored && FINISHED.has(stored.status)) || attempt === 19) {
      merge(conv, server);
      if (!state.active) renderThread();
      break;
    }
    await sleep(250);
  }
  watchTools(conv); // the reply may have called tools
}

// ------------------------------------------------------------------ actions

const leafOf = (conv) => pathTo(conv.messages, conv.leafId).at(-1)?.id ?? null;

function put(conv, message) {
  const known = conv.messages.get(message.id);
  const merged = { ...known, ...message, created_at: known?.created_at ?? new Date().toISOString() };
  conv.messages.set(message.id, merged);
  return merged;
}

const putReply = (conv, id, parentId) =>
  put(conv, { id, parent_id: parentId, role: "assistant", content: "", status: "streaming", finish_reason: null });

/**
 * A new user message (`parentId`: undefined continues the shown branch, null starts a new root),
 * naming `documentIds` (those attached since the last message).
 */
function postAction(conv, content, parentId, model, documentIds = [], tools = []) {
  const clientMessageId = uuid(); // one per action, reused by its retries
  const shownLeaf = leafOf(conv);
  // Omitting parent_id continues the server's selected leaf; name it when the page shows another.
  const sent = parentId === undefined && shownLeaf !== conv.serverLeafId ? shownLeaf : parentId;
  const parent = parentId === undefined ? shownLeaf : parentId;
  return {
    measured: true,
    start: (signal) => api.postMessage(conv.id, { content, clientMessageId, parentId: sent, model, documentIds, tools }, signal),
    head(data) {
      tray.sent(documentIds);
      put(conv, { id: data.user_message_id, parent_id: parent, role: "user", content, status: "complete", document_ids: documentIds });
      return putReply(conv, data.reply_id, data.user_message_id);
    },
  };
}

function regenerateAction(conv, assistant, model) {
  const clientMessageId = uuid();
  return {
    measured: true,
    start: (signal) => api.regenerate(assistant.id, clientMessageId, model, signal),
    head: (data) => putReply(conv, data.reply_id, data.user_message_id ?? assistant.parent_id),
  };
}

/** Follow a reply that is still streaming: after the saved cursor, or from the start. */
function resumeAction(reply) {
  const saved = cursors.get(reply.id);
  reply.content = saved ? saved.text : "";
  if (saved?.restarted) reply.restarted = true;
  return { reply, start: (signal) => api.resume(reply.id, saved?.cursor, signal), head: () => reply };
}

/**
 * The open chat, created first when none is (`shownAs`: the title the page gives it until the
 * server names it); null when it could not be, the error shown with `retry`.
 */
async function ensureConversation(shownAs, retry) {
  if (state.conv) return state.conv;
  const model = chosenModel();
  try {
    // Untitled: the server names a chat after its first reply (and never overwrites a title given here).
    const created = await api.createConversation();
    state.provisional.set(created.id, shownAs.split("\n")[0].slice(0, 60));
    state.conv = { id: created.id, title: created.title, leafId: null, serverLeafId: null, messages: new Map(), toolRows: new Map() };
  } catch (err) {
    fail(err, retry);
    return null;
  }
  choice.set(state.conv.id, model);
  tray.adopt(state.conv.id);
  if (!state.archived) state.conversations.unshift({ id: state.conv.id, title: state.conv.title });
  history.pushState(null, "", `#/c/${encodeURIComponent(state.conv.id)}`);
  renderList();
  renderTitle();
  return state.conv;
}

async function send(content) {
  const model = chosenModel();
  if (!(await ensureConversation(content, () => send(content)))) return;
  const action = postAction(state.conv, content, undefined, model, tray.pendingIds(), offeredTools());
  action.afterHead = () => {
    $("input").value = "";
  };
  await stream(action);
}

/** Runs a streaming action: the reply drawn as it arrives, errors shown with a retry. */
async function stream(action) {
  const conv = state.conv;
  const controller = new AbortController();
  let reply = action.reply ?? null;
  state.active = { controller, reply, stopping: false };
  state.error = null;
  render();
  try {
    const sentAt = performance.now();
    const response = await action.start(controller.signal);
    const hooks = {
      // Resumes continue a reply already under way: only a new reply's first token is a TTFT.
      firstToken: action.measured ? () => api.telemetry(Math.round(performance.now() - sentAt)) : null,
      head(data) {
        reply = action.head(data);
        state.active.reply = reply;
        conv.leafId = reply.id;
        action.afterHead?.();
        render();
        return reply;
      },
      changed: renderReply,
      restarted: () => renderThread(), // the reply's note appears at once
    };
    await follow(response, hooks, reply);
  } catch (err) {
    if (err.name === "AbortError") return;
    if (err instanceof ReplyFailed) fail(err, () => stream(regenerateAction(conv, reply, chosenModel())));
    else if (reply && !(err instanceof ApiError)) fail(new StreamCut("The connection to the reply was lost."), () => stream(resumeAction(reply)));
    else fail(err, () => stream(action)); // nothing was created yet: same action, same client_message_id
  } finally {
    if (state.active?.controller === controller) state.active = null;
    if (state.conv === conv) {
      render();
      if (reply && !controller.signal.aborted) {
        settle(conv, reply.id);
        if (reply.status !== "streaming") refreshTitlesSoon(conv.id);
      }
    }
  }
}

async function stop() {
  const active = state.active;
  if (!active?.reply || active.stopping) return;
  active.stopping = true;
  renderComposer();
  try {
    await api.stop(active.reply.id); // the stream then ends with done: cancelled
    announce("Reply stopped.");
  } catch (err) {
    active.stopping = false;
    renderComposer();
    fail(err, stop);
  }
}

/** A search result: chat `id` open with the branch holding `messageId` selected and that message in view. */
async function reveal(id, messageId) {
  if (state.conv?.id !== id) {
    history.pushState(null, "", `#/c/${encodeURIComponent(id)}`); // no hashchange: opened here, once
    await openConversation(id);
  }
  const conv = state.conv;
  if (conv?.id !== id || !messageId || !conv.messages.has(messageId)) return;
  if (!pathTo(conv.messages, conv.leafId).some((m) => m.id === messageId)) {
    conv.leafId = newestLeaf(conv.messages, messageId);
    renderThread();
    api.selectLeaf(conv.id, conv.leafId).catch((err) => fail(err, () => reveal(id, messageId)));
  }
  const article = $("thread").querySelector(`article[data-id="${CSS.escape(messageId)}"]`);
  article?.scrollIntoView({ block: "center" });
  article?.classList.add("found");
}

async function switchTo(siblingId) {
  const conv = state.conv;
  const leaf = newestLeaf(conv.messages, siblingId);
  const previous = conv.leafId;
  conv.leafId = leaf;
  renderThread();
  const sibling = conv.messages.get(siblingId);
  const siblings = siblingsOf(conv.messages, sibling);
  announce(`Version ${siblings.indexOf(sibling) + 1} of ${siblings.length}.`);
  try {
    await api.selectLeaf(conv.id, leaf);
  } catch (err) {
    if (conv.leafId === leaf) conv.leafId = previous;
    renderThread();
    fail(err, () => switchTo(siblingId));
  }
}

/** Uploads `files` to the open chat (created first if none is open), each with its chip. */
async function attach(files) {
  files = [...files];
  if (!files.length) return;
  const conv = await ensureConversation(files[0].name, () => attach(files));
  if (!conv || state.conv !== conv) return;
  announce(files.length === 1 ? `Uploading ${files[0].name}.` : `Uploading ${files.length} documents.`);
  await Promise.all(files.map((file) => tray.upload(file)));
}

/** Opens the page a citation of reply `button.dataset.id` names. */
function openCitation(button) {
  const message = state.conv?.messages.get(button.dataset.id);
  const citation = message && citationsOf(message).find((c) => String(c.number) === button.dataset.number);
  if (citation) openPage(citation, button);
}

// ------------------------------------------------------------------ Parley's tools

/**
 * How often the calls are read, by what the page waits on (toolcalls.js waitingOn): quickly while a call
 * is judged or run and while its results turn into the next reply, less often while only the owner's
 * answers are missing (another browser may give one), and after a failed read.
 */
const TOOL_POLL_MS = { calls: 750, continuation: 750, asked: 2000, failed: 3000 };
/** The open chat's poll of its tool calls: a new one (another chat, an answer sent) ends the one before. */
const toolPoll = { ticket: 0, timer: 0 };

function stopToolPoll() {
  toolPoll.ticket++;
  clearTimeout(toolPoll.timer);
}

/** Reads `conv`'s tool calls now, and again while the page waits on one. */
function watchTools(conv) {
  if (state.conv !== conv || !anyCalls(conv.messages)) return;
  stopToolPoll();
  const ticket = toolPoll.ticket;
  toolPoll.timer = setTimeout(() => pollTools(conv, ticket), 0);
}

async function pollTools(conv, ticket) {
  const current = () => state.conv === conv && toolPoll.ticket === ticket;
  let rows;
  try {
    rows = await api.toolCalls(conv.id);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) sessionEnded();
    else if (current()) toolPoll.timer = setTimeout(() => pollTools(conv, ticket), TOOL_POLL_MS.failed); // read again later
    return;
  }
  if (!current()) return;
  let changed = takeRows(conv, rows);
  // Every call has ended: the broker appends the results and the next reply, which the page reads.
  if (!state.active && waitingOn(conv.messages, pathTo(conv.messages, conv.leafId), conv.toolRows) === "continuation") {
    try {
      const server = await api.conversation(conv.id);
      if (!current()) return;
      if (!state.active) {
        merge(conv, server);
        changed = true;
      }
    } catch {
      // read again at the next turn
    }
  }
  if (!state.active && followTools(conv)) changed = true;
  if (changed) renderThread();
  const leaf = pathTo(conv.messages, conv.leafId).at(-1);
  if (!state.active && leaf?.role === "assistant" && leaf.status === "streaming") {
    stream(resumeAction(leaf)); // the next reply, drawn as it streams; its end settles it and watches again
    return;
  }
  const waiting = waitingOn(conv.messages, pathTo(conv.messages, conv.leafId), conv.toolRows);
  if (waiting && current()) toolPoll.timer = setTimeout(() => pollTools(conv, ticket), TOOL_POLL_MS[waiting]);
}

/** Takes the server's rows; whether any card changed. An answer sent is forgotten once its call is no longer asked. */
function takeRows(conv, rows) {
  const fresh = new Map(rows.map((r) => [r.id, r]));
  const changed = fresh.size !== conv.toolRows.size || rows.some((r) => JSON.stringify(r) !== JSON.stringify(conv.toolRows.get(r.id)));
  conv.toolRows = fresh;
  for (const id of state.toolAnswers.keys()) if (fresh.get(id)?.state !== "asked") state.toolAnswers.delete(id);
  if (state.toolEditing && fresh.get(state.toolEditing)?.state !== "asked" && !state.toolAnswers.has(state.toolEditing)) {
    Object.assign(state, { toolEditing: null, toolDraft: null }); // answered elsewhere (another browser)
  }
  return changed;
}

/** The shown branch ends at a reply's calls or their results and the next reply is there: show it. */
function followTools(conv) {
  const leaf = pathTo(conv.messages, conv.leafId).at(-1);
  if (!leaf || !(leaf.role === "tool" || leaf.tool_calls?.length)) return false;
  const next = newestLeaf(conv.messages, leaf.id);
  if (next === leaf.id) return false;
  conv.leafId = next;
  return true;
}

/** Approve, reject or edit (`args`: the new arguments, an object) call `callId` of the open chat. */
async function answerCall(callId, answer, args) {
  const conv = state.conv;
  if (!conv || state.toolAnswers.has(callId)) return;
  state.toolAnswers.set(callId, answer);
  renderThread();
  try {
    await api.answerToolCall(conv.id, callId, answer, args);
    if (state.toolEditing === callId) Object.assign(state, { toolEditing: null, toolDraft: null });
    announce({ approve: "Call approved.", reject: "Call rejected.", edit: "Call sent with the edited arguments." }[answer]);
  } catch (err) {
    state.toolAnswers.delete(callId);
    if (err instanceof ApiError && err.status === 409) {
      if (state.toolEditing === callId) Object.assign(state, { toolEditing: null, toolDraft: null });
      announce("This call is no longer waiting for an answer.");
    } else fail(err, () => answerCall(callId, answer, args));
  }
  if (state.conv !== conv) return;
  renderThread();
  watchTools(conv);
}

/** The edit form's arguments, sent only when they are a JSON object; else the form says what is wrong. */
function submitToolEdit(form) {
  const field = form.elements.arguments;
  const parsed = parseArguments(field.value);
  if (parsed.error) {
    form.querySelector(".form-error").textContent = parsed.error;
    field.setAttribute("aria-invalid", "true");
    field.focus();
    return;
  }
  state.toolDraft = field.value;
  answerCall(form.dataset.callId, "edit", parsed.value);
}

/** The names in the composer's Tools field: Parley's tools (the operator's or the organisation's) this message offers the model. */
function offeredTools() {
  return [...new Set($("tools").value.split(/[\s,]+/).filter(Boolean))];
}

function toggleTools() {
  const row = $("tools-row");
  row.hidden = !row.hidden;
  renderComposer();
  if (!row.hidden) $("tools").focus();
}

// ------------------------------------------------------------------ errors

function fail(err, retry) {
  if (err instanceof ApiError && err.status === 401) {
    sessionEnded();
    return;
  }
  const retryable = !(err instanceof ApiError) || err.retryable;
  state.error = { message: err.message || "Something went wrong.", retryAfter: err.retryAfter ?? null, retry: retryable ? retry : null };
  renderError();
}

function announce(text) {
  $("announce").textContent = text;
}

// ------------------------------------------------------------------ drawing

function render() {
  renderList();
  renderThread();
  renderComposer();
  renderAttachments();
  renderError();
}

function renderList() {
  const list = $("conversations");
  // Not while a title is being typed: a background refresh would take the text and the focus.
  if (state.renaming && list.querySelector("form.rename")) return;
  const ctx = { activeId: state.conv?.id, renaming: state.renaming, menuFor: state.menuFor, archived: state.archived, shared: state.shared };
  const shown = state.conversations.map((c) => ({ ...c, title: shownTitle(c) }));
  list.replaceChildren(...view.conversationList(shown, ctx));
  $("list-title").textContent = state.archived ? "Archived chats" : "Your chats";
  $("archived-toggle").textContent = state.archived ? "Back to chats" : "Archived chats";
  $("archived-toggle").setAttribute("aria-pressed", String(state.archived));
}

function renderTitle() {
  $("title").textContent = state.conv ? shownTitle(state.conv) || "Untitled chat" : "New chat";
}

/** Each message body's HTML as last drawn (before any feedback changed it), for renderThread's "same body". */
const drawnBodies = new WeakMap();

function renderThread() {
  const thread = $("thread");
  const focus = focusedControl(thread);
  const nearBottom = thread.scrollHeight - thread.scrollTop - thread.clientHeight < 80;
  renderTitle();
  const conv = state.conv;
  const path = conv ? pathTo(conv.messages, conv.leafId) : [];
  const before = new Map([...thread.querySelectorAll("article")].map((a) => [a.dataset.id, a]));
  // An edit in progress (of a message, or of a tool call's arguments) keeps its form: a redraw (a
  // reply settling, a poll) must not put back the original text under the caret of someone typing.
  const editor = state.editing ? thread.querySelector(`form.edit[data-id="${CSS.escape(state.editing)}"]`) : null;
  const toolEditor = state.toolEditing ? thread.querySelector(`form.tool-edit[data-call-id="${CSS.escape(state.toolEditing)}"]`) : null;
  const typing = [editor, toolEditor].some((f) => f?.contains(document.activeElement)) ? document.activeElement : null;
  const caret = typing?.tagName === "TEXTAREA" ? [typing.selectionStart, typing.selectionEnd, typing.selectionDirection] : null;
  // A turn uses every document of the chat: each is shown under the message that brought it, once.
  const shownDocuments = new Set();
  const toolCtx = { answered: state.toolAnswers, editing: state.toolEditing, draft: state.toolDraft };
  // A tool's result is shown in its call's card, under the reply that made the call: not as a message.
  const articles = path.filter((m) => m.role !== "tool").map((m) => {
    const newDocuments = (m.document_ids || []).filter((id) => !shownDocuments.has(id));
    for (const id of newDocuments) shownDocuments.add(id);
    return view.messageView(m, {
      siblings: siblingsOf(conv.messages, m),
      editing: state.editing === m.id,
      busy: !!state.active,
      documents: newDocuments.map((id) => tray.filename(id) || "a document"),
      tools: m.role === "assistant" && m.tool_calls?.length ? view.toolCallsView(callsOf(m, conv.toolRows), toolCtx) : null,
    });
  });
  // Keep a body that shows the same thing: a reply's live region must stay the same node for its
  // aria-busy → false to be read out, and a selection in it survives. "The same" is compared with
  // the body as it was drawn, so a button's "Copied" feedback inside it does not count as a change.
  for (const article of articles) {
    const oldArticle = before.get(article.dataset.id);
    const old = oldArticle?.querySelector(".body");
    const fresh = article.querySelector(".body");
    if (old && fresh && old.className === fresh.className && (drawnBodies.get(old) ?? old.innerHTML) === fresh.innerHTML) {
      fresh.replaceWith(old);
    } else if (fresh) drawnBodies.set(fresh, fresh.innerHTML);
    // A copy button still saying "Copied" stays, with its timer: a redraw must not take the feedback away.
    for (const shown of oldArticle?.querySelectorAll(".meta button.copied") ?? []) {
      article.querySelector(`.meta button[data-action="${CSS.escape(shown.dataset.action)}"]`)?.replaceWith(shown);
    }
    const form = article.querySelector("form.edit");
    if (form && editor) form.replaceWith(editor);
    const toolForm = article.querySelector("form.tool-edit");
    if (toolForm && toolEditor && toolForm.dataset.callId === toolEditor.dataset.callId) toolForm.replaceWith(toolEditor);
  }
  thread.replaceChildren(...(articles.length ? articles : [view.emptyThread()]));
  if (typing) {
    typing.focus(); // moving the node blurred it
    if (caret) typing.setSelectionRange(...caret);
  } else if (state.editing && !editor) thread.querySelector("form.edit textarea")?.focus();
  else if (state.toolEditing && !toolEditor) thread.querySelector("form.tool-edit textarea")?.focus();
  else restoreFocus(thread, focus);
  if (nearBottom) thread.scrollTop = thread.scrollHeight;
}

// A streaming reply's body is redrawn at most once a frame, and only after five times what its last
// redraw took has passed: a long reply's Markdown takes milliseconds to parse and sanitise, and a fast
// engine sends hundreds of tokens a second, so drawing each one would freeze the page. The reply's end
// is drawn at once.
const redraw = { reply: null, frame: 0, notBefore: 0 };

function renderReply(reply) {
  redraw.reply = reply;
  if (reply.status === "streaming") {
    if (!redraw.frame) redraw.frame = requestAnimationFrame(drawPendingReply);
    return;
  }
  cancelAnimationFrame(redraw.frame);
  redraw.frame = 0;
  drawReply(reply);
}

function drawPendingReply(now) {
  if (now < redraw.notBefore) {
    redraw.frame = requestAnimationFrame(drawPendingReply);
    return;
  }
  redraw.frame = 0;
  const start = performance.now();
  drawReply(redraw.reply);
  redraw.notBefore = start + 5 * (performance.now() - start);
}

function drawReply(reply) {
  const thread = $("thread");
  const body = thread.querySelector(`article[data-id="${CSS.escape(reply.id)}"] .body`);
  if (!body) return;
  const nearBottom = thread.scrollHeight - thread.scrollTop - thread.clientHeight < 80;
  view.fillBody(body, reply);
  drawnBodies.set(body, body.innerHTML);
  if (nearBottom) thread.scrollTop = thread.scrollHeight;
}

function renderComposer() {
  const picker = $("model");
  const chosen = chosenModel();
  if (picker.options.length !== state.models.length || [...picker.options].some((o, i) => o.value !== state.models[i])) {
    picker.replaceChildren(...state.models.map((id) => new Option(modelLabel(id), id)));
  }
  picker.value = chosen;
  picker.title = chosen === AUTO ? "Parley chooses the model" : chosen;
  const active = state.active;
  $("send").hidden = !!active;
  $("stop").hidden = !active;
  $("stop").disabled = !active?.reply || active.stopping;
  $("stop").textContent = active?.stopping ? "Stopping…" : "Stop";
  const tools = offeredTools().length;
  $("tools-toggle").textContent = tools ? `Tools (${tools})` : "Tools";
  $("tools-toggle").setAttribute("aria-expanded", String(!$("tools-row").hidden));
}

function renderAttachments() {
  const list = $("attachments");
  // Polls redraw the chips every second or so: a focused remove button keeps the focus.
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.id : null;
  list.replaceChildren(...view.attachmentList(tray.items));
  list.hidden = !tray.items.length;
  if (focused) list.querySelector(`button[data-id="${CSS.escape(focused)}"]`)?.focus();
}

function renderError() {
  const box = $("error");
  box.hidden = !state.error;
  box.replaceChildren(...(state.error ? view.errorView(state.error) : []));
}

/** Which control had focus, by its message's place in the thread, so a redraw can give it back. */
function focusedControl(thread) {
  const control = document.activeElement;
  if (!control || !thread.contains(control) || !control.dataset.action) return null;
  const articles = [...thread.querySelectorAll("article")];
  return { index: articles.indexOf(control.closest("article")), action: control.dataset.action, label: control.getAttribute("aria-label") };
}

function restoreFocus(thread, focus) {
  if (!focus) return;
  const article = thread.querySelectorAll("article")[focus.index];
  if (!article) return;
  const candidates = [...article.querySelectorAll(`[data-action="${focus.action}"]`)].filter((b) => !b.disabled);
  const fallback = article.querySelector("button:not([disabled])");
  (candidates.find((b) => b.getAttribute("aria-label") === focus.label) || candidates[0] || fallback)?.focus();
}

// ------------------------------------------------------------------ events

function onThreadClick(event) {
  const button = event.target.closest("button[data-action]");
  if (!button || !state.conv) return;
  const message = state.conv.messages.get(button.dataset.id);
  switch (button.dataset.action) {
    case "switch":
      if (message && !state.active) switchTo(message.id);
      break;
    case "edit":
      state.editing = message.id;
      renderThread();
      break;
    case "edit-cancel":
      state.editing = null;
      renderThread();
      break;
    case "regenerate":
      if (!state.active) stream(regenerateAction(state.conv, message, chosenModel()));
      break;
    case "copy":
      if (message) copied(button, message.content);
      break;
    case "rate-up":
    case "rate-down":
      if (message) rate(message, button.dataset.action.slice("rate-".length));
      break;
    case "copy-code":
      copied(button, button.closest(".code-block")?.querySelector("code")?.textContent ?? "");
      break;
    case "cite":
      openCitation(button);
      break;
    case "tool-approve":
      answerCall(button.dataset.id, "approve");
      break;
    case "tool-reject":
      answerCall(button.dataset.id, "reject");
      break;
    case "tool-edit":
      Object.assign(state, { toolEditing: button.dataset.id, toolDraft: null });
      renderThread();
      break;
    case "tool-edit-cancel":
      Object.assign(state, { toolEditing: null, toolDraft: null });
      renderThread();
      break;
  }
}

/** Rates a reply (the same rating again takes it back); the stored rating is what the buttons then show. */
async function rate(message, rating) {
  const conv = state.conv;
  const wanted = message.feedback?.rating === rating ? null : rating;
  try {
    await api.rate(conv.id, message.id, wanted);
  } catch (err) {
    announce(`Could not save the rating: ${err.message}`);
    return;
  }
  const current = conv.messages.get(message.id);
  if (current) conv.messages.set(message.id, { ...current, feedback: wanted ? { rating: wanted, reason: "" } : undefined });
  if (state.conv === conv) renderThread();
  announce(wanted ? `Rated ${wanted === "up" ? "good" : "bad"}.` : "Rating taken back.");
}

async function copied(button, text) {
  announce((await copyFrom(button, text)) ? "Copied to the clipboard." : "Could not copy to the clipboard.");
}

function onThreadSubmit(event) {
  event.preventDefault();
  const toolForm = event.target.closest("form.tool-edit");
  if (toolForm) {
    submitToolEdit(toolForm);
    return;
  }
  const form = event.target.closest("form.edit");
  const message = state.conv?.messages.get(form?.dataset.id);
  const content = form?.elements.content.value.trim();
  if (!message || !content || state.active) return;
  state.editing = null;
  stream(postAction(state.conv, content, message.parent_id ?? null, chosenModel(), [], offeredTools()));
}

function onErrorClick(event) {
  const action = event.target.closest("button[data-action]")?.dataset.action;
  const retry = state.error?.retry;
  if (action === "dismiss" || action === "retry") {
    state.error = null;
    renderError();
  }
  if (action === "retry" && retry) retry();
}

// ------------------------------------------------------------------ the sidebar's options

const titleOf = (id) => shownTitle(state.conversations.find((c) => c.id === id)) || "Untitled chat";

function onListClick(event) {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const id = button.dataset.id;
  switch (button.dataset.action) {
    case "menu":
      state.menuFor = state.menuFor === id ? null : id;
      renderList();
      if (state.menuFor) $("conversations").querySelector(".conv-menu button")?.focus();
      break;
    case "rename":
      state.menuFor = null;
      state.renaming = id;
      renderList();
      $("conversations").querySelector("form.rename input")?.select();
      break;
    case "rename-cancel":
      endRename(id);
      break;
    case "archive":
    case "unarchive":
      archive(id, button.dataset.action === "archive");
      break;
    case "delete":
      remove(id);
      break;
    case "share":
      share(id);
      break;
    case "unshare":
      unshare(id);
      break;
  }
}

/** A read-only link to the chat's selected branch: shown in its menu and copied. */
async function share(id) {
  let made;
  try {
    made = await api.createShare(id);
  } catch (err) {
    fail(err);
    return;
  }
  state.shared = { id, url: new URL(made.path, location.origin).href };
  renderList();
  const copied = await copyText(state.shared.url);
  announce(copied ? "Link copied. Anyone with it can read this branch." : "Link made. Anyone with it can read this branch.");
}

/** Every link to the chat stops working. */
async function unshare(id) {
  try {
    for (const s of await api.shares(id)) await api.revokeShare(id, s.id);
  } catch (err) {
    fail(err);
    return;
  }
  if (state.shared?.id === id) state.shared = null;
  renderList();
  announce("The chat's links no longer work.");
}

/** #/continue/<secret>: a shared chat forked into this account, then opened. */
async function continueShared(secret) {
  try {
    const forked = await api.forkShare(secret);
    await loadConversations();
    location.replace(`#/c/${encodeURIComponent(forked.id)}`);
  } catch (err) {
    fail(err);
  }
}

function onListSubmit(event) {
  event.preventDefault();
  const form = event.target.closest("form.rename");
  const title = form?.elements.title.value.trim();
  if (form && title) rename(form.dataset.id, title);
}

function onListKey(event) {
  if (event.key !== "Escape") return;
  if (state.renaming) endRename(state.renaming);
  else if (state.menuFor) closeMenu();
}

function closeMenu() {
  const id = state.menuFor;
  state.menuFor = null;
  renderList();
  $("conversations").querySelector(`li[data-id="${CSS.escape(id)}"] .conv-menu-button`)?.focus();
}

function endRename(id) {
  state.renaming = null;
  renderList();
  $("conversations").querySelector(`li[data-id="${CSS.escape(id)}"] a`)?.focus();
}

/** Applies the server's summary of a changed chat to the list and the open conversation. */
function updated(id, summary) {
  const listed = state.conversations.find((c) => c.id === id);
  if (listed && summary?.title !== undefined) listed.title = summary.title;
  if (state.conv?.id === id && summary?.title !== undefined) state.conv.title = summary.title;
}

async function rename(id, title) {
  try {
    updated(id, (await api.updateConversation(id, { title })) ?? { title });
  } catch (err) {
    fail(err, () => rename(id, title));
    return;
  }
  announce("Chat renamed.");
  endRename(id);
  renderTitle();
}

async function archive(id, archived) {
  const title = titleOf(id);
  try {
    await api.updateConversation(id, { archived });
  } catch (err) {
    fail(err, () => archive(id, archived));
    return;
  }
  state.menuFor = null;
  state.conversations = state.conversations.filter((c) => c.id !== id); // it moved to the other list
  renderList();
  announce(archived ? `Archived ${title}.` : `Unarchived ${title}.`);
}

async function remove(id) {
  const title = titleOf(id);
  if (!window.confirm(`Delete the chat “${title}”? This cannot be undone.`)) {
    closeMenu();
    return;
  }
  try {
    await api.deleteConversation(id);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) {
      fail(err, () => remove(id));
      return;
    }
  }
  state.menuFor = null;
  state.conversations = state.conversations.filter((c) => c.id !== id);
  choice.forget(id);
  if (state.conv?.id === id) {
    history.pushState(null, "", location.pathname);
    newChat();
  } else renderList();
  announce(`Deleted ${title}.`);
  $("new-chat").focus();
}

function toggleArchived() {
  state.archived = !state.archived;
  Object.assign(state, { menuFor: null, renaming: null, conversations: [] });
  renderList();
  loadConversations();
}

function onDocumentClick(event) {
  if (state.menuFor && !event.target.closest(".conv-menu, .conv-menu-button")) {
    state.menuFor = null;
    renderList();
  }
}

function onModelChange() {
  choice.set(state.conv?.id, $("model").value);
  renderComposer();
}

function onComposerSubmit(event) {
  event.preventDefault();
  // A chat still opening has no branch to answer yet: sent now, the message would start a new chat.
  // It goes to the chat being opened once it has opened.
  if (state.opening) {
    state.sendWhenOpen = true;
    return;
  }
  const content = $("input").value.trim();
  if (content && !state.active) send(content);
}

function onAttachmentsClick(event) {
  const button = event.target.closest('button[data-action="remove-document"]');
  const item = button && tray.items.find((i) => String(i.key) === button.dataset.id);
  if (!item) return;
  if (item.doc && !window.confirm(`Delete the document “${item.filename}”? Later replies will no longer use it.`)) return;
  tray.remove(item.key).then(() => {
    if (!tray.items.includes(item)) {
      announce(`Removed ${item.filename}.`);
      $("attach").focus();
    }
  });
}

/** Files dragged onto the composer are attached when dropped there. */
function onComposerDrag(event) {
  if (!event.dataTransfer?.types.includes("Files")) return;
  event.preventDefault();
  const over = event.type === "dragover" || event.type === "dragenter";
  // dragleave also fires when moving onto a child: only leaving the form itself counts.
  if (event.type === "dragleave" && $("composer").contains(event.relatedTarget)) return;
  $("composer").classList.toggle("dropping", over);
  if (event.type === "drop") attach(event.dataTransfer.files);
}

function onComposerKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
}

async function boot() {
  const landing = setUpSignIn(enter);
  $("signout").addEventListener("click", signOut);
  $("new-chat").addEventListener("click", () => {
    history.pushState(null, "", location.pathname);
    newChat();
    $("input").focus();
  });
  $("thread").addEventListener("click", onThreadClick);
  $("thread").addEventListener("submit", onThreadSubmit);
  $("error").addEventListener("click", onErrorClick);
  $("composer").addEventListener("submit", onComposerSubmit);
  $("input").addEventListener("keydown", onComposerKey);
  $("stop").addEventListener("click", stop);
  $("tools-toggle").addEventListener("click", toggleTools);
  $("tools").addEventListener("input", renderComposer);
  $("tools").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault(); // not a send: the message box is where a message is written
    $("input").focus();
  });
  $("attach").addEventListener("click", () => $("file").click());
  $("file").addEventListener("change", () => {
    const files = [...$("file").files];
    $("file").value = ""; // the same file may be chosen again
    attach(files);
  });
  $("attachments").addEventListener("click", onAttachmentsClick);
  for (const type of ["dragenter", "dragover", "dragleave", "drop"]) $("composer").addEventListener(type, onComposerDrag);
  setUpPanel();
  setUpSearch({ open: reveal });
  $("model").addEventListener("change", onModelChange);
  $("conversations").addEventListener("click", onListClick);
  $("conversations").addEventListener("submit", onListSubmit);
  $("conversations").addEventListener("keydown", onListKey);
  $("archived-toggle").addEventListener("click", toggleArchived);
  $("import").addEventListener("click", () => $("import-file").click());
  $("import-file").addEventListener("change", importChosenFile);
  document.addEventListener("click", onDocumentClick);
  window.addEventListener("hashchange", () => auth.signedIn && route());
  let session = null;
  try {
    session = await auth.restore();
  } catch (err) {
    showSignIn(err.message);
    return;
  }
  if (session) enter(session);
  else showSignIn(landing);
}

boot();

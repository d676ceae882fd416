// The documents of the open chat: each upload with its progress, then each document's status,
// read again until the server says it is ready or failed.
//
// A document uploaded with the chat's id is attached to the chat: every later turn uses it.
// The next message also names the documents uploaded since the last one (`document_ids`), so
// the thread shows which message brought them. Nothing here touches the DOM; app.js draws
// `tray.items` whenever `hooks.changed()` says they moved.

import { api, ApiError } from "./api.js";

/** Delays between two reads of a processing document: quick at first, then every few seconds. */
const POLL_MS = [500, 1000, 1000, 2000, 2000, 3000];
const pollDelay = (n) => POLL_MS[Math.min(n, POLL_MS.length - 1)];

const FINAL = new Set(["ready", "failed"]);

let keys = 0;

/**
 * What a document's chip says: "uploading 40%", "processing 12/150 pages", "ready", "failed: <why>".
 * `item`: {progress: {sent, total} | null, doc: the server's document | null, error: {message} | null}.
 */
export function statusText(item) {
  if (item.error) return `failed: ${item.error.message}`;
  const doc = item.doc;
  if (!doc) {
    const { sent = 0, total = 0 } = item.progress || {};
    return total > 0 ? `uploading ${Math.min(100, Math.floor((100 * sent) / total))}%` : "uploading…";
  }
  if (doc.status === "ready") return "ready";
  if (doc.status === "failed") return `failed: ${doc.error?.message || "the document could not be read"}`;
  return doc.pages_total > 0 ? `processing ${doc.pages_ready}/${doc.pages_total} pages` : "processing…";
}

/** The state a chip shows as data-status: uploading | processing | ready | failed. */
export function statusOf(item) {
  if (item.error) return "failed";
  return item.doc ? item.doc.status : "uploading";
}

export class Tray {
  /** `hooks`: {changed(), settled(item) (a document turned ready or failed), failed(err, retry)}. */
  constructor(hooks) {
    this.hooks = hooks;
    this.conversationId = null;
    this.items = []; // {key, filename, progress, doc, error, pending (not yet named by a message)}
    this.ticket = 0; // bumped when the chat changes: late answers for the previous one are dropped
    this.timers = new Set();
  }

  /** Shows the documents of chat `conversationId` (none for null: a new chat). */
  async open(conversationId) {
    const ticket = this.reset(conversationId);
    if (!conversationId) return;
    let listed;
    try {
      listed = await api.documents();
    } catch (err) {
      if (ticket === this.ticket) this.hooks.failed(err, () => this.open(conversationId));
      return;
    }
    if (ticket !== this.ticket) return;
    const known = new Set(this.items.map((i) => i.doc?.id));
    const mine = listed.filter((d) => d.conversation_id === conversationId && !known.has(d.id));
    mine.sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
    this.items.push(...mine.map((doc) => ({ key: ++keys, filename: doc.filename, progress: null, doc, error: null, pending: false })));
    for (const item of this.items) this.watch(item, ticket);
    this.hooks.changed();
  }

  /** The chat the page just created for what is in the tray: keeps the items, now the chat's. */
  adopt(conversationId) {
    this.conversationId = conversationId;
  }

  /** Forgets everything (sign-out, another chat): polls and uploads under way stop counting. */
  reset(conversationId = null) {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.conversationId = conversationId;
    this.items = [];
    this.hooks.changed();
    return ++this.ticket;
  }

  /** Uploads `file` to the open chat (which must exist by now), then follows its processing. */
  async upload(file) {
    const ticket = this.ticket;
    const item = { key: ++keys, filename: file.name, progress: { sent: 0, total: file.size }, doc: null, error: null, pending: true };
    this.items.push(item);
    this.hooks.changed();
    try {
      item.doc = await api.uploadDocument(file, this.conversationId, (sent, total) => {
        item.progress = { sent, total };
        if (ticket === this.ticket) this.hooks.changed();
      });
    } catch (err) {
      item.error = { code: err.code || "network", message: err.message };
      if (ticket === this.ticket) {
        this.hooks.changed();
        this.hooks.settled(item);
      }
      return;
    }
    if (ticket !== this.ticket) return;
    item.filename = item.doc.filename || item.filename;
    this.hooks.changed();
    if (FINAL.has(item.doc.status)) this.hooks.settled(item);
    else this.watch(item, ticket);
  }

  /** Reads a processing document again after a while, until it is ready or failed. */
  watch(item, ticket, round = 0) {
    if (!item.doc || FINAL.has(item.doc.status)) return;
    const timer = setTimeout(async () => {
      this.timers.delete(timer);
      let doc;
      try {
        doc = await api.document(item.doc.id);
      } catch (err) {
        if (ticket !== this.ticket) return;
        if (err instanceof ApiError && err.status === 404) return this.drop(item); // deleted elsewhere
        return this.watch(item, ticket, round + 1); // a blip: the next read may work
      }
      if (ticket !== this.ticket || !this.items.includes(item)) return;
      item.doc = doc;
      this.hooks.changed();
      if (FINAL.has(doc.status)) this.hooks.settled(item);
      else this.watch(item, ticket, round + 1);
    }, pollDelay(round));
    this.timers.add(timer);
  }

  /** Removes a chip: a refused upload only from the page, a document from the server too (DELETE). */
  async remove(key) {
    const item = this.items.find((i) => i.key === key);
    if (!item) return;
    if (item.doc) {
      try {
        await api.deleteDocument(item.doc.id);
      } catch (err) {
        if (!(err instanceof ApiError && err.status === 404)) {
          this.hooks.failed(err, () => this.remove(key));
          return;
        }
      }
    }
    this.drop(item);
  }

  drop(item) {
    this.items = this.items.filter((i) => i !== item);
    this.hooks.changed();
  }

  /** The documents the next message names: uploaded since the last message, and not failed. */
  pendingIds() {
    return this.items.filter((i) => i.pending && i.doc && i.doc.status !== "failed").map((i) => i.doc.id);
  }

  /** A message named `ids`: the next one names only newer uploads. */
  sent(ids) {
    for (const item of this.items) if (item.doc && ids.includes(item.doc.id)) item.pending = false;
  }

  /** The name a document was uploaded under, when this chat has it. */
  filename(id) {
    return this.items.find((i) => i.doc?.id === id)?.filename ?? null;
  }
}

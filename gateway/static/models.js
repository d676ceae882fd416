// The model picker's data: the models the server offers, and the one each conversation uses.
//
// The choice is remembered in localStorage, per conversation (parley.model.<id>) and as
// the default for chats that have none yet (parley.model). Only model ids are kept.

import { api } from "./api.js";

export const AUTO = "auto";
const DEFAULT_KEY = "parley.model";
const PREFIX = "parley.model.";

/** "auto" first, then the served models; only "auto" when the server lists none (or has no /v1/models). */
export async function offeredModels() {
  try {
    const ids = await api.models();
    return [AUTO, ...ids.filter((id) => id && id !== AUTO)];
  } catch (err) {
    if (err.status === 401) throw err;
    return [AUTO];
  }
}

export const choice = {
  /** The model of `conversationId` (null: a new chat), among `offered`; "auto" when none is remembered. */
  get(conversationId, offered) {
    const saved = (conversationId && localStorage.getItem(PREFIX + conversationId)) || localStorage.getItem(DEFAULT_KEY);
    return offered.includes(saved) ? saved : AUTO;
  },
  /** Remembers `model` for `conversationId` (when given) and as the default for new chats. */
  set(conversationId, model) {
    if (conversationId) localStorage.setItem(PREFIX + conversationId, model);
    localStorage.setItem(DEFAULT_KEY, model);
  },
  forget(conversationId) {
    localStorage.removeItem(PREFIX + conversationId);
  },
  clear() {
    for (const key of Object.keys(localStorage)) if (key === DEFAULT_KEY || key.startsWith(PREFIX)) localStorage.removeItem(key);
  },
};

/** A model id as the picker shows it: the name after the organisation ("HuggingFaceTB/SmolLM2-…" → "SmolLM2-…"). */
export function modelLabel(id) {
  return id === AUTO ? "Auto" : id.split("/").pop();
}

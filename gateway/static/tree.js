// The conversation tree as the page sees it: pure functions over a Map id → message.
//
// Messages are the API's {id, parent_id, role, content, status, finish_reason,
// created_at}; siblings share a parent_id (null for the roots) and are ordered
// oldest first, as the server orders them.

const time = (m) => {
  const t = m.created_at ? Date.parse(m.created_at) : NaN;
  return Number.isNaN(t) ? Number.MAX_SAFE_INTEGER : t; // not yet stored: newest
};

const byAge = (a, b) => time(a) - time(b) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

export function childrenOf(messages, parentId) {
  return [...messages.values()].filter((m) => (m.parent_id ?? null) === parentId).sort(byAge);
}

/** `message` and its siblings, oldest first. */
export function siblingsOf(messages, message) {
  return childrenOf(messages, message.parent_id ?? null);
}

/** The leaf reached from `id` by always taking the newest child. */
export function newestLeaf(messages, id) {
  let current = id;
  for (const seen = new Set([id]); ; seen.add(current)) {
    const kids = childrenOf(messages, current);
    if (!kids.length) return current;
    const next = kids[kids.length - 1].id;
    if (seen.has(next)) return current; // a cycle only corrupt data could make
    current = next;
  }
}

/** The messages from the root to `leafId`, oldest first; with no known leaf, the newest branch. */
export function pathTo(messages, leafId) {
  if (!leafId || !messages.has(leafId)) {
    const roots = childrenOf(messages, null);
    if (!roots.length) return [];
    leafId = newestLeaf(messages, roots[roots.length - 1].id);
  }
  const path = [];
  const seen = new Set();
  for (let id = leafId; id && messages.has(id) && !seen.has(id); id = messages.get(id).parent_id) {
    seen.add(id);
    path.push(messages.get(id));
  }
  return path.reverse();
}

export const FINISHED = new Set(["complete", "cancelled", "failed", "rejected", "filtered"]);

/** The status a reply takes for a `done` event's finish_reason. */
export function statusOf(finishReason) {
  return (
    { stop: "complete", length: "complete", cancelled: "cancelled", failed: "failed", rejected: "rejected", content_filter: "filtered" }[
      finishReason
    ] || "complete"
  );
}

-- Parley's routing rule inside HAProxy (edge/config.py loads it): the chat.tokens partition a request's
-- stream lives on, as the fetch `lua.parley_partition(P)`; the configuration sends it to `p mod N`'s backend.
--
--   /v1/conversations/{id}[/...]          partition_for(id, P): Kafka's murmur2 of the id (parley/partitioning.py)
--   /v1/messages/{id}/stream + a cursor   the cursor's partition: Last-Event-ID, else ?last_event_id=, is `p:offset`
--   anything else                         -1: the configuration's round-robin backend
--
-- Lua 5.3 integers are 64 bits: every product below is masked back to 32, as Java's int arithmetic wraps.

local M = 0x5bd1e995
local MASK = 0xffffffff

-- Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), unsigned.
local function murmur2(data)
    local length = #data
    local h = (0x9747b28c ~ length) & MASK
    local tail = length - length % 4
    for i = 1, tail, 4 do
        local a, b, c, d = data:byte(i, i + 3)
        local k = a | (b << 8) | (c << 16) | (d << 24)
        k = (k * M) & MASK
        k = k ~ (k >> 24)
        k = (k * M) & MASK
        h = ((h * M) & MASK) ~ k
    end
    local extra = length % 4
    if extra >= 3 then h = h ~ (data:byte(tail + 3) << 16) end
    if extra >= 2 then h = h ~ (data:byte(tail + 2) << 8) end
    if extra >= 1 then
        h = h ~ data:byte(tail + 1)
        h = (h * M) & MASK
    end
    h = h ~ (h >> 13)
    h = (h * M) & MASK
    h = h ~ (h >> 15)
    return h
end

local function unquote(s)
    return (s:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end

-- The partition a `p:offset` cursor names; -1 for anything else (the gateway judges it).
local function cursor_partition(cursor, partitions)
    if cursor == nil then return -1 end
    local p, offset = cursor:match("^%s*(%d+):(%-?%d+)%s*$")
    if p == nil or #p > 9 or not (offset == "-1" or offset:match("^%d+$") and #offset <= 18) then return -1 end
    p = tonumber(p)
    if p >= partitions then return -1 end
    return p
end

local function query_value(query, name)
    for pair in query:gmatch("[^&;]+") do
        local key, value = pair:match("^([^=]*)=(.*)$")
        if key ~= nil and value ~= "" and unquote((key:gsub("%+", " "))) == name then
            return unquote((value:gsub("%+", " ")))
        end
    end
    return nil
end

core.register_fetches("parley_partition", function(txn, partitions)
    partitions = tonumber(partitions)
    local path = txn.sf:path() or ""
    local id = path:match("^/v1/conversations/([^/]+)")
    if id ~= nil then
        return (murmur2(unquote(id)) & 0x7fffffff) % partitions
    end
    if path:match("^/v1/messages/[^/]+/stream$") then
        local header = txn.http:req_get_headers()["last-event-id"]
        local cursor = header and header[0]
        if cursor == nil or cursor == "" then cursor = query_value(txn.sf:query() or "", "last_event_id") end
        return cursor_partition(cursor, partitions)
    end
    return -1
end)

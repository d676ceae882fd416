-- Hop-by-hop request headers (RFC 9110 §7.6.1), removed before a request goes on to a gateway
-- (edge/config.py runs it as `http-request lua.parley_hop_by_hop`). HAProxy frames the connection itself
-- and forwards these as they came; a gateway must see none of them: not the headers a client's
-- `Connection` names, not a protocol upgrade (the API has none: the request is served as plain HTTP,
-- as a server that ignores `Upgrade` does), not a client's proxy credentials.

local ALWAYS = {
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "http2-settings",
    "proxy-authorization",
}

core.register_action("parley_hop_by_hop", { "http-req" }, function(txn)
    local headers = txn.http:req_get_headers()
    local named = {}
    for _, value in pairs(headers["connection"] or {}) do
        for token in value:gmatch("[^,%s]+") do
            named[#named + 1] = token:lower()
        end
    end
    for _, name in ipairs(named) do
        txn.http:req_del_header(name)
    end
    for _, name in ipairs(ALWAYS) do
        txn.http:req_del_header(name)
    end
end)

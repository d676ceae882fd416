-- The shard map's check (edge/config.py loads it once, not per thread): the i-th of N gateways in
-- PARLEY_EDGE_GATEWAYS must run as shard i/N. Each gateway's /readyz says what it runs as; one that says
-- otherwise is logged, once per change (it still gets its share: its streams borrow, costing reads, not
-- correctness; refusing it would stop a rolling change of N).

local gateways = {}  -- {host, port}, in shard order
for host, port in (os.getenv("EDGE_SHARD_MAP") or ""):gmatch("%[?([^,%]]+)%]?:(%d+)") do
    gateways[#gateways + 1] = { host, tonumber(port) }
end
local every_ms = tonumber(os.getenv("EDGE_SHARD_CHECK_MS") or "") or 1000

-- The shard a gateway's /readyz names. A plain socket, HTTP/1.0 read to its close: HAProxy's own HTTP
-- client would log every probe as a request.
local function said_shard(gateway)
    local socket = core.tcp()
    socket:settimeout(every_ms / 1000)
    local answer = nil
    if socket:connect(gateway[1], gateway[2]) then
        socket:send("GET /readyz HTTP/1.0\r\nHost: edge\r\n\r\n")
        answer = socket:receive("*a")
    end
    socket:close()
    return answer and answer:match('"shard"%s*:%s*"([0-9/]*)"')
end

core.register_task(function()
    local n = #gateways
    if n < 2 then return end
    local logged = {}
    while true do
        for i, gateway in ipairs(gateways) do
            local shard, expected = said_shard(gateway), string.format("%d/%d", i - 1, n)
            if shard ~= nil and shard ~= expected and logged[i] ~= shard then
                core.log(core.err, string.format(
                    '{"level":"error","service":"edge","message":"gateway runs as another shard than its place in '
                    .. 'PARLEY_EDGE_GATEWAYS: its streams will borrow partitions","gateway":%d,"shard":"%s","expected":"%s"}',
                    i - 1, shard, expected))
            end
            logged[i] = shard
        end
        core.msleep(every_ms)
    end
end)

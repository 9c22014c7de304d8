-- Sluice for HAProxy 2.6: ask the decision service (sluice-decide's forward-auth
-- endpoint) before each request, with core.httpclient.
--
--   http-request lua.sluice_decide     -- admit, or answer the 429 / 503 itself
--   http-response lua.sluice_release   -- give back concurrency slots, if any
--
-- Admitted: the RateLimit fields are kept in txn.sluice_* variables for
-- http-response set-header (see haproxy.cfg). Rejected: the service's answer
-- (status, Retry-After, RateLimit fields, problem+json body) goes to the client
-- as it is. Unreachable or slow: 503 when txn.sluice_on_error is "closed",
-- else the request goes on (fail open). Guide: docs/gateways/haproxy.md.
--
-- SLUICE_DECIDE_URL is haproxy.cfg's sluice_decide proxy, which tries the
-- service once and answers within its timeouts. The calls here set no timeout
-- of their own: core.httpclient would retry a timed-out call 3 times.

local url = os.getenv("SLUICE_DECIDE_URL") or "http://127.0.0.1:8083/v1/decide"
local release_url = url:gsub("/v1/decide$", "/v1/release")

-- Headers of the client's request the service reads (identity: the demo's).
local identity = { "x-tenant", "x-user", "x-api-key" }
-- Headers of an admitted answer kept for the response, and their variables.
local kept = {
  ["ratelimit"] = "txn.sluice_ratelimit",
  ["ratelimit-policy"] = "txn.sluice_ratelimit_policy",
  ["x-ratelimit-limit"] = "txn.sluice_x_ratelimit_limit",
  ["x-ratelimit-remaining"] = "txn.sluice_x_ratelimit_remaining",
  ["x-ratelimit-reset"] = "txn.sluice_x_ratelimit_reset",
  ["sluice-degraded"] = "txn.sluice_degraded",
  ["sluice-release"] = "txn.sluice_release",
}
-- Headers of a rejection not copied to the client (HAProxy sets its own).
local hop = { ["content-length"] = true, ["connection"] = true,
              ["transfer-encoding"] = true, ["date"] = true }

local unavailable = '{"type": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", '
  .. '"title": "Service Unavailable", "status": 503, '
  .. '"detail": "The rate limiter is unavailable; retry in 1 s.", '
  .. '"error": "limiter_unavailable", "message": "The rate limiter is unavailable; retry in 1 s.", '
  .. '"retry_after_seconds": 1, "violated-policies": []}'

local function first(values)
  if values == nil then return nil end
  return values[0] or values[1]
end

local function ask(txn)
  local headers = txn.http:req_get_headers()
  local question = {
    ["x-forwarded-method"] = { txn.sf:method() },
    ["x-forwarded-uri"] = { txn.sf:pathq() },
    ["x-forwarded-for"] = { txn.sf:src() },
  }
  for _, name in ipairs(identity) do
    local value = first(headers[name])
    if value ~= nil then question[name] = { value } end
  end
  local client = core.httpclient()
  local ok, answer = pcall(client.get, client, { url = url, headers = question })
  if not ok or answer == nil or answer.status == nil or answer.status == 0 then
    return nil
  end
  return answer
end

local function unreachable(txn)
  if txn:get_var("txn.sluice_on_error") ~= "closed" then return end
  txn:done({
    status = 503,
    headers = { ["content-type"] = { "application/problem+json" }, ["retry-after"] = { "1" } },
    body = unavailable,
  })
end

core.register_action("sluice_decide", { "http-req" }, function(txn)
  local answer = ask(txn)
  if answer == nil then return unreachable(txn) end
  if answer.status >= 200 and answer.status < 300 then
    for name, var in pairs(kept) do
      local value = first(answer.headers[name])
      if value ~= nil then txn:set_var(var, value) end
    end
    return
  end
  -- Only the service's own rejections (problem+json) are passed on: an error
  -- page of HAProxy's (the service's port closed: 503; no answer in time: 504)
  -- means unreachable.
  local kind = first(answer.headers["content-type"]) or ""
  if not kind:find("problem+json", 1, true) then return unreachable(txn) end
  local reply = txn:reply({ status = answer.status, body = answer.body or "" })
  for name, values in pairs(answer.headers) do
    if not hop[name] then
      local value = first(values)
      if value ~= nil then reply:add_header(name, value) end
    end
  end
  txn:done(reply)
end)

core.register_action("sluice_release", { "http-res" }, function(txn)
  local token = txn:get_var("txn.sluice_release")
  if token == nil then return end
  local client = core.httpclient()
  pcall(client.post, client, { url = release_url, headers = { ["sluice-release"] = { token } } })
end)

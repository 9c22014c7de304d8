-- Sluice for nginx: a script's reply as a decision, and the decision as HTTP, as
-- sluice/engine.py and sluice/headers.py do (draft-ietf-httpapi-ratelimit-headers).
--
-- A decision is a table: allowed, status (200, 429, 503), outcome (allowed,
-- limited, shadow_limited, fail_open, fail_closed, local), deciding (the limit
-- that rejected with the longest wait, or the one closest to rejecting), statuses
-- (every limit, shadow ones too), retry_after (s), policy, version, route,
-- degraded (decided without Redis), at (Redis time, s; 0 when unknown).

local cjson = require "cjson.safe"

local ceil, floor, max = math.ceil, math.floor, math.max
local concat = table.concat

local _M = {}

local MICROS = 1000000
local SLOT_RETRY_AFTER = 1.0
local PROBLEM_QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
local PROBLEM_REDUCED_CAPACITY =
  "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
local PHRASES = { [429] = "Too Many Requests", [503] = "Service Unavailable" }

-- µs from `now` (µs) to the end of a calendar quota's period: the next one's once
-- Redis time has passed it, this one's start before it began (sluice/kinds/quota.py).
local function period_reset(bounds, now)
  local finish = bounds[2]
  if now >= bounds[2] * MICROS then
    finish = bounds[3]
  elseif now < bounds[1] * MICROS then
    finish = bounds[1]
  end
  return max(0, finish * MICROS - now)
end

--- Statuses of the buckets from a reply with `step` values per bucket (fits, debt, ...);
--- `now`: the decision's store time, µs (a calendar quota resets at its period's end).
function _M.bucket_statuses(plan, keys, reply, step, now)
  local statuses = {}
  for i, p in ipairs(plan.limits) do
    local at = step * (i - 1) + 2
    local fits, debt = reply[at] == 1, reply[at + 1]
    local remaining = max(0, floor((p.capacity - debt) / p.tick))
    if plan.sharded then
      remaining = remaining * p.shards
    end
    local reset = debt / MICROS
    if p.bounds then
      reset = period_reset(p.bounds, now or 0) / MICROS
    end
    statuses[i] = {
      name = p.name,
      limit = p.limit,
      key = keys[i],
      quota = p.quota,
      window = p.window,
      fits = fits,
      remaining = remaining,
      reset = reset,
      retry_after = fits and 0 or max(0, debt + p.increment - p.capacity) / MICROS,
      shadow = p.shadow,
    }
  end
  return statuses
end

--- Statuses of the concurrency slots from reply[offset..]: (fits, in flight after) per slot.
function _M.slot_statuses(plan, keys, reply, offset, statuses)
  for i, slot in ipairs(plan.slots) do
    local at = offset + 2 * (i - 1)
    local fits, count = reply[at] == 1, reply[at + 1]
    local most = slot.limit.max_inflight
    statuses[#statuses + 1] = {
      name = slot.name,
      limit = slot.limit,
      key = keys[i],
      quota = most,
      window = 0,
      fits = fits,
      remaining = max(0, most - count),
      reset = 0,
      retry_after = fits and 0 or SLOT_RETRY_AFTER,
      shadow = slot.shadow,
      concurrent = true,
    }
  end
  return statuses
end

local function deciding(statuses, admitted)
  local best
  for _, s in ipairs(statuses) do
    if not s.shadow then
      if admitted then
        if best == nil or s.remaining < best.remaining
          or (s.remaining == best.remaining and -s.reset < -best.reset) then
          best = s
        end
      elseif not s.fits and (best == nil or s.retry_after > best.retry_after) then
        best = s
      end
    end
  end
  return best
end

--- The decision for `statuses` (buckets, then slots) of `prepared` under `plan`.
function _M.conclude(engine, prepared, plan, statuses, admitted, at)
  local shadow = false
  for _, s in ipairs(statuses) do
    if s.shadow and not s.fits then
      shadow = true
    end
  end
  local best = deciding(statuses, admitted)
  local outcome = "allowed"
  if not admitted then
    outcome = "limited"
  elseif shadow then
    outcome = "shadow_limited"
  end
  local retry_after
  if not admitted then
    retry_after = best and best.retry_after or 1.0
  end
  return {
    allowed = admitted,
    status = admitted and 200 or 429,
    outcome = outcome,
    deciding = best,
    retry_after = retry_after,
    policy = plan.policy,
    version = engine.version,
    route = prepared.route,
    statuses = statuses,
    shadow = shadow,
    degraded = false,
    at = at or 0,
    unknown_tenant = prepared.unknown_tenant == true,
    documentation = engine.documentation or "",
    declared_cost = prepared.declared_cost, -- not taken as is (rules.request_cost)
  }
end

--- The decision of a token-bucket reply (step 2) or a hot reply's buckets (step 3).
function _M.decision(engine, prepared, plan, reply, at)
  -- a quota resets at a moment: the store's time, else (no reply seen yet) ours
  local now = floor((at > 0 and at or ngx.now()) * MICROS + 0.5)
  local statuses = _M.bucket_statuses(plan, prepared.keys, reply, 2, now)
  return _M.conclude(engine, prepared, plan, statuses, reply[1] == 1, at)
end

local function t_of(s)
  return ceil(s.fits and s.reset or s.retry_after)
end

--- RateLimit-Policy and RateLimit of a decision, or nil, nil when no bucket decided
--- (a degraded decision's are those of the in-process buckets, as headers.py says).
function _M.rate_limit_fields(decision)
  local policies, states = {}, {}
  for _, s in ipairs(decision.statuses) do
    if not s.shadow then
      if s.concurrent then
        policies[#policies + 1] = '"' .. s.name .. '";q=' .. s.quota .. ';qu="concurrent-requests"'
      else
        policies[#policies + 1] = '"' .. s.name .. '";q=' .. s.quota .. ";w=" .. s.window
      end
      if s.remaining >= 0 then
        states[#states + 1] = '"' .. s.name .. '";r=' .. s.remaining .. ";t=" .. t_of(s)
      end
    end
  end
  if #policies == 0 then
    return nil, nil
  end
  return concat(policies, ", "), concat(states, ", ")
end

--- GitHub-style X-RateLimit-Limit, -Remaining and -Reset (epoch s, on Redis's clock
--- when the decision carries its time), or nil when no RateLimit fields apply.
function _M.github_fields(decision)
  local best = decision.deciding
  if best == nil then
    return nil
  end
  local at = decision.at > 0 and decision.at or ngx.now()
  return best.quota, best.remaining, ceil(at + best.reset)
end

--- Whole seconds to wait, rounded up, at least 1, plus up to `jitter` seconds
--- (clients rejected together do not all come back in the same second).
function _M.retry_after_seconds(decision, jitter)
  return max(1, ceil((decision.retry_after or 0) + (jitter or 0) * math.random()))
end

-- Limits in words, as sluice/quota.py says them (limit_in_words, public_name,
-- public_description): the 429 tells customers the limit, not its internal name.
local PERIOD_WORDS = { [1] = "second", [60] = "minute", [3600] = "hour", [86400] = "day" }
local SUBJECT_WORDS = {
  tenant = "per account", user = "per user", api_key = "per API key", ip = "per IP address",
}
local MISSING_SUBJECT = {
  tenant = "Requests that name no tenant share one bucket.",
  user = "Requests that carry no user id share one bucket.",
  api_key = "Requests that carry no API key share one bucket.",
  ip = "Requests whose address is unknown share one bucket.",
}
local UNKNOWN_TENANT = "The tenant named in the request is not known, so the default limits applied"

local function thousands(n)
  local text = string.format("%d", n)
  local cut = (#text - 1) % 3 + 1
  return text:sub(1, cut) .. (text:sub(cut + 1):gsub("(%d%d%d)", ",%1"))
end

local function requests(n)
  return thousands(n) .. (n == 1 and " request" or " requests")
end

--- `2 requests per second per user, bursts of 5` (a bucket) or `at most 2 requests in
--- flight per account` (a concurrency cap).
function _M.limit_in_words(limit, concurrent)
  local subject = SUBJECT_WORDS[limit.dimension]
  if concurrent then
    return "at most " .. requests(limit.max_inflight) .. " in flight " .. subject
  end
  local text
  if limit.kind == "sliding_window" then -- no burst: any window holds at most the limit
    text = requests(limit.limit) .. " in any " .. PERIOD_WORDS[limit.window] .. " " .. subject
  elseif limit.kind == "calendar_quota" then
    local period = limit.cycle == "billing" and "billing month" or limit.per
    text = requests(limit.limit) .. " per " .. period .. " " .. subject
  else
    text = requests(limit.rate) .. " per " .. PERIOD_WORDS[limit.period] .. " " .. subject
      .. ", bursts of " .. thousands(limit.burst)
  end
  if limit.cost ~= nil and limit.cost ~= 1 then
    text = text .. "; each request counts as " .. thousands(limit.cost)
  end
  return text
end

local function public_name(s)
  if s.limit.name then
    return s.limit.name
  end
  local noun = "Rate limit" -- sluice.kinds' LimitKind.noun
  if s.concurrent then
    noun = "Concurrency limit"
  elseif s.limit.kind == "calendar_quota" then
    noun = s.limit.per == "day" and "Daily quota" or "Monthly quota"
  end
  return noun .. " " .. SUBJECT_WORDS[s.limit.dimension]
end

local function public_description(s)
  return s.limit.description or _M.limit_in_words(s.limit, s.concurrent)
end

--- How the caller was counted, when it was not as it may think (sluice/headers.py).
local function notes(decision, violated)
  local said, seen, by_ip = {}, {}, false
  for _, s in ipairs(violated) do
    local dimension = s.limit.dimension
    by_ip = by_ip or dimension == "ip"
    local note = MISSING_SUBJECT[dimension]
    if not seen[note] and s.key:find(":" .. dimension .. ":~:", 1, true) then
      said[#said + 1], seen[note] = note, true
    end
  end
  if decision.unknown_tenant then
    said[#said + 1] = UNKNOWN_TENANT
      .. (by_ip and ": it was identified by its IP address only." or ".")
  end
  return said
end

local function json_list(items)
  local encoded = {}
  for i, item in ipairs(items) do
    encoded[i] = cjson.encode(item)
  end
  return "[" .. concat(encoded, ",") .. "]"
end

--- The problem+json body of a rejected decision (with the plain error/message members):
--- each violated limit by its public name and description, as sluice/headers.py says it.
function _M.problem(decision, seconds)
  local violated, concurrent = {}, false
  for _, s in ipairs(decision.statuses) do
    if not s.fits and not s.shadow then
      violated[#violated + 1] = s
      concurrent = concurrent or s.concurrent == true
    end
  end
  local problem, code, message
  if decision.status == 503 then
    problem, code = PROBLEM_REDUCED_CAPACITY, "limiter_unavailable"
    message = "The rate limiter is unavailable; retry in " .. seconds .. " s."
  else
    problem = PROBLEM_QUOTA_EXCEEDED
    code = concurrent and "too_many_concurrent_requests" or "rate_limited"
    local said = {}
    for i, s in ipairs(violated) do
      said[i] = public_name(s) .. " exceeded (" .. public_description(s) .. ")"
    end
    local head = #said > 0 and concat(said, ", ") or "Rate limit exceeded"
    local parts = { head .. "; retry in " .. seconds .. " s." }
    for _, note in ipairs(notes(decision, violated)) do
      parts[#parts + 1] = note
    end
    message = concat(parts, " ")
  end
  local names, limits = {}, {}
  for i, s in ipairs(violated) do
    names[i] = s.name
    limits[i] = { policy = s.name, name = public_name(s), description = public_description(s) }
  end
  local text = cjson.encode(message)
  local body = {
    '{"type": ', cjson.encode(problem),
    ', "title": ', cjson.encode(PHRASES[decision.status] or "Error"),
    ', "status": ', tostring(decision.status),
    ', "detail": ', text,
    ', "error": ', cjson.encode(code),
    ', "message": ', text,
    ', "retry_after_seconds": ', tostring(seconds),
    ', "violated-policies": ', json_list(names),
  }
  if decision.status ~= 503 then -- the limiter's fault: no limit to tell of
    body[#body + 1] = ', "limits": ' .. json_list(limits)
  end
  if decision.unknown_tenant then
    body[#body + 1] = ', "unknown_tenant": true'
  end
  if decision.documentation and decision.documentation ~= "" then
    body[#body + 1] = ', "documentation": ' .. cjson.encode(decision.documentation)
  end
  body[#body + 1] = "}"
  return concat(body)
end

return _M

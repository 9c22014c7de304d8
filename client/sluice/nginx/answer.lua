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

--- Statuses of the buckets from a reply with `step` values per bucket (fits, debt, ...).
function _M.bucket_statuses(plan, keys, reply, step)
  local statuses = {}
  for i, p in ipairs(plan.limits) do
    local at = step * (i - 1) + 2
    local fits, debt = reply[at] == 1, reply[at + 1]
    local remaining = max(0, floor((p.capacity - debt) / p.tick))
    if plan.sharded then
      remaining = remaining * p.shards
    end
    statuses[i] = {
      name = p.name,
      key = keys[i],
      quota = p.quota,
      window = p.window,
      fits = fits,
      remaining = remaining,
      reset = debt / MICROS,
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
  }
end

--- The decision of a token-bucket reply (step 2) or a hot reply's buckets (step 3).
function _M.decision(engine, prepared, plan, reply, at)
  local statuses = _M.bucket_statuses(plan, prepared.keys, reply, 2)
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

local function json_list(names)
  local quoted = {}
  for i, name in ipairs(names) do
    quoted[i] = cjson.encode(name)
  end
  return "[" .. concat(quoted, ",") .. "]"
end

--- The problem+json body of a rejected decision (with the plain error/message members).
function _M.problem(decision, seconds)
  local violated, concurrent = {}, false
  for _, s in ipairs(decision.statuses) do
    if not s.fits and not s.shadow then
      violated[#violated + 1] = s.name
      concurrent = concurrent or s.concurrent == true
    end
  end
  local problem, code, message
  if decision.status == 503 then
    problem, code = PROBLEM_REDUCED_CAPACITY, "limiter_unavailable"
    message = "The rate limiter is unavailable; retry in " .. seconds .. " s."
  elseif concurrent then
    problem, code = PROBLEM_QUOTA_EXCEEDED, "too_many_concurrent_requests"
    message = "Too many requests in flight (" .. concat(violated, ", ") .. "); retry in "
      .. seconds .. " s."
  else
    local named = #violated > 0 and concat(violated, ", ") or "quota"
    problem, code = PROBLEM_QUOTA_EXCEEDED, "rate_limited"
    message = "Rate limit exceeded (" .. named .. "); retry in " .. seconds .. " s."
  end
  local text = cjson.encode(message)
  return concat({
    '{"type": ', cjson.encode(problem),
    ', "title": ', cjson.encode(PHRASES[decision.status] or "Error"),
    ', "status": ', tostring(decision.status),
    ', "detail": ', text,
    ', "error": ', cjson.encode(code),
    ', "message": ', text,
    ', "retry_after_seconds": ', tostring(seconds),
    ', "violated-policies": ', json_list(violated), "}",
  })
end

return _M

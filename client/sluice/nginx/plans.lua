-- Sluice for nginx: policies compiled for the hot path, as sluice/plans.py and
-- sluice/bucket.py: per limit its geometry in microseconds of refill (tick,
-- increment, capacity), its key parts and its header name; per policy the
-- token-bucket script's arguments, already formatted.
--
-- A sliding window (sluice/kinds/sliding.py) is read by the simulations
-- (failure.lua, hotkeys.lua, answer.lua) with the bucket's arithmetic: its state
-- in ticks of ceil(window / limit) µs fits, counts down and waits exactly as a
-- bucket of increment = cost x tick and capacity = limit x tick does. So is a
-- calendar quota (sluice/kinds/quota.py), in ticks of ceil(period / limit) µs;
-- its plan holds its period's bounds (`bounds`), and the policy's plan is good
-- until the first of them ends (`valid_until`).

local calendar = require "sluice.nginx.calendar"

local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min

local _M = {}

local PERIODS = { [1] = "s", [60] = "min", [3600] = "h", [86400] = "day" }
local MICROS = 1000000
_M.PERIODS = PERIODS

local function window_plan(policy, limit, cost, share)
  local held = max(cost, floor(limit.limit / share))
  local window = limit.window * MICROS
  local tick = ceil(window / held) -- as token_bucket.lua computes it
  return {
    limit = limit,
    dimension = limit.dimension,
    name = limit.dimension .. "-" .. PERIODS[limit.window] .. "-sliding",
    middle = "}:route:" .. policy.route .. ":" .. limit.dimension .. ":",
    suffix = ":" .. limit.window .. "s:sliding_window",
    tick = tick,
    increment = cost * tick,
    capacity = held * tick,
    quota = held,
    window = limit.window,
    shadow = limit.shadow,
    shards = 1,
    lease = 0,
    lease_us = 0,
    gcra = false,
    -- token_bucket.lua's ARGV: cost, limit, and the flag followed by w<window µs>
    argv = { string.format("%d", cost), string.format("%d", held) },
    rest = "w" .. string.format("%d", window),
  }
end

local function quota_plan(policy, limit, cost, share, cal, now)
  local held = max(cost, floor(limit.limit / share))
  local start, finish, after =
    calendar.period_bounds(floor(now), limit.per, limit.cycle, cal.rule, cal.billing_day)
  local tick = ceil((finish - start) * MICROS / held) -- as token_bucket.lua computes it
  return {
    limit = limit,
    dimension = limit.dimension,
    name = limit.dimension .. "-" .. limit.per .. "-quota",
    middle = "}:route:" .. policy.route .. ":" .. limit.dimension .. ":",
    suffix = ":" .. limit.period .. ":calendar_quota",
    tick = tick,
    increment = cost * tick,
    capacity = held * tick,
    quota = held,
    window = finish - start,
    bounds = { start, finish, after },
    shadow = limit.shadow,
    shards = 1,
    lease = 0,
    lease_us = 0,
    gcra = false,
    -- token_bucket.lua's ARGV: cost, limit, and the flag followed by q<start:end:next end>
    argv = { string.format("%d", cost), string.format("%d", held) },
    rest = string.format("q%d:%d:%d", start, finish, after),
  }
end

local function limit_plan(policy, limit, cost, share, cal, now)
  if limit.kind == "sliding_window" then
    return window_plan(policy, limit, cost, share)
  end
  if limit.kind == "calendar_quota" then
    return quota_plan(policy, limit, cost, share, cal, now)
  end
  local shards = limit.shards
  local part = share * shards
  local tick = max(1, ceil(limit.period * MICROS * part / limit.rate))
  local burst = max(cost, floor(limit.burst / part))
  local capacity = burst * tick
  return {
    limit = limit,
    dimension = limit.dimension,
    name = limit.dimension .. "-" .. PERIODS[limit.period],
    middle = "}:route:" .. policy.route .. ":" .. limit.dimension .. ":",
    suffix = ":" .. limit.period .. "s",
    tick = tick,
    increment = cost * tick,
    capacity = capacity,
    quota = floor(capacity / tick) * shards,
    window = ceil(capacity / MICROS),
    shadow = limit.shadow,
    shards = shards,
    lease = limit.lease > 0 and max(1, floor(limit.lease / cost)) or 0, -- requests' worth
    lease_us = limit.lease > 0 and limit.lease_ms * 1000 or 0,
    gcra = true,
    argv = { string.format("%d", cost * tick), string.format("%d", capacity) },
    rest = "",
  }
end

--- `policy` compiled for requests of `cost` (`share`: 1, or the local mode's share);
--- its calendar quotas in the period of tenant calendar `cal` holding `now` (epoch s).
function _M.compile(policy, cost, share, cal, now)
  local limits, args, counts_tenant, sharded, leased = {}, {}, false, false, false
  local valid_until = math.huge
  for i, limit in ipairs(policy.limits) do
    local plan = limit_plan(policy, limit, limit.cost or cost, share, cal, now)
    if plan.bounds then
      valid_until = min(valid_until, plan.bounds[2])
    end
    limits[i] = plan
    args[#args + 1] = plan.argv[1]
    args[#args + 1] = plan.argv[2]
    args[#args + 1] = (limit.shadow and "1" or "0") .. plan.rest
    counts_tenant = counts_tenant or limit.dimension == "tenant"
    sharded = sharded or limit.shards > 1
    leased = leased or plan.lease > 0
  end
  local slots = {}
  for i, cap in ipairs(policy.concurrency) do
    slots[i] = {
      limit = cap,
      dimension = cap.dimension,
      name = cap.dimension .. "-concurrent",
      middle = "}:route:" .. policy.route .. ":" .. cap.dimension .. ":",
      args = {
        string.format("%d", cap.max_inflight),
        string.format("%d", cap.timeout * 1000),
        cap.shadow and "1" or "0",
      },
      shadow = cap.shadow,
    }
    counts_tenant = counts_tenant or cap.dimension == "tenant"
  end
  return {
    policy = policy,
    limits = limits,
    args = args,
    counts_tenant = counts_tenant,
    sharded = sharded,
    slots = slots,
    hot = #slots > 0 or leased, -- decided by hot.lua (sluice/hot.py)
    calendar = cal,
    valid_until = valid_until,
    rehearsals = setmetatable({}, { __mode = "k" }), -- scheduled plan -> rehearsal
  }
end

return _M

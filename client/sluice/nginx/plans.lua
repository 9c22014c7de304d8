-- Sluice for nginx: policies compiled for the hot path, as sluice/plans.py and
-- sluice/bucket.py: per limit its geometry in microseconds of refill (tick,
-- increment, capacity), its key parts and its header name; per policy the
-- token-bucket script's arguments, already formatted.

local ceil, floor, max = math.ceil, math.floor, math.max

local _M = {}

local PERIODS = { [1] = "s", [60] = "min", [3600] = "h", [86400] = "day" }
local MICROS = 1000000
_M.PERIODS = PERIODS

local function limit_plan(policy, limit, cost, share)
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
  }
end

--- `policy` compiled for requests of `cost` (`share`: 1, or the local mode's share).
function _M.compile(policy, cost, share)
  local limits, args, counts_tenant, sharded, leased = {}, {}, false, false, false
  for i, limit in ipairs(policy.limits) do
    local plan = limit_plan(policy, limit, limit.cost or cost, share)
    limits[i] = plan
    args[#args + 1] = string.format("%d", plan.increment)
    args[#args + 1] = string.format("%d", plan.capacity)
    args[#args + 1] = limit.shadow and "1" or "0"
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
    rehearsals = setmetatable({}, { __mode = "k" }), -- scheduled plan -> rehearsal
  }
end

return _M

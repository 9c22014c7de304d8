-- Sluice for nginx: a request decided without Redis, by its route's failure mode, as
-- sluice/failure.py does: open (in-process buckets holding the whole limit, what they
-- admit charged back to Redis once it answers), local (a 1/gateways share), closed
-- (503), open-unbounded. These are methods of the gateway (sluice.nginx.gateway).

local answer = require "sluice.nginx.answer"
local failure = require "sluice.nginx.failure"

local max = math.max
local now_us = failure.now_us

local Gateway = {}

function Gateway:failover(engine, prepared, err)
  local mode = prepared.failure_mode
  local share, admitted_as
  if mode == "local" then
    share, admitted_as = self.gateways, "local"
  elseif mode == "open" then
    share, admitted_as = 1, "fail_open"
  else
    return self:unchecked(engine, prepared)
  end
  local owed
  if self.rejections.seen_count > 0 then
    owed = self.rejections:owed(prepared.keys, now_us())
  end
  local decision = self:decide_locally(engine, prepared, share, owed)
  if decision.allowed then
    decision.outcome = admitted_as
    if mode == "open" then
      self:owe(prepared, decision)
    end
  end
  decision.degraded = true
  decision.failure_mode = mode
  decision.error = err
  return decision
end

function Gateway:decide_locally(engine, prepared, share, owed)
  local plan = prepared.plan
  if share ~= 1 then
    plan = engine:plan(plan.policy, prepared.cost, share, plan.calendar)
  end
  local at = self:store_time()
  local function buckets()
    local reply = self.local_buckets:decide(prepared.keys, plan, owed)
    return answer.decision(engine, prepared, plan, reply, at)
  end
  if #prepared.slots == 0 then
    return buckets()
  end
  local reply = self.local_slots:acquire(plan, prepared.slots, share)
  local taken = {}
  for i, key in ipairs(prepared.slots) do
    if reply[2 * i] == 1 then
      taken[#taken + 1] = key
    end
  end
  local slots = answer.slot_statuses(plan, prepared.slots, reply, 2, {})
  if reply[1] ~= 1 then
    return answer.conclude(engine, prepared, plan, slots, false, at)
  end
  local decision = buckets()
  if not decision.allowed then
    self.local_slots:release(taken)
    return decision
  end
  local statuses = decision.statuses
  for _, s in ipairs(slots) do
    statuses[#statuses + 1] = s
  end
  decision = answer.conclude(engine, prepared, plan, statuses, true, at)
  if #taken > 0 then
    decision.held = { keys = taken, local_slots = true }
  end
  return decision
end

local MAX_OWED = 10000

--- Owe Redis what the local buckets just admitted (the limits that fit), so the
--- fleet pays back over-admission once Redis answers (charge.lua, as sluice/backlog.py).
function Gateway:owe(prepared, decision)
  local id = table.concat(prepared.keys, "\n")
  local entry = self.owed[id]
  if entry == nil then
    if self.owed_count >= MAX_OWED then
      return -- past the bound, over-admission is not paid back
    end
    entry = { keys = prepared.keys, amounts = {}, capacities = {} }
    -- charge.lua knows GCRA only: the other kinds' admissions are not paid back
    local keys = {}
    for i, p in ipairs(prepared.plan.limits) do
      if p.gcra then
        keys[#keys + 1] = prepared.keys[i]
        entry.amounts[#keys], entry.capacities[#keys] = 0, p.capacity
      end
    end
    if #keys == 0 then
      return
    end
    entry.keys = keys
    self.owed[id], self.owed_count = entry, self.owed_count + 1
  end
  local at = 0
  for i, p in ipairs(prepared.plan.limits) do
    if p.gcra then
      at = at + 1
      if decision.statuses[i].fits then
        entry.amounts[at] = entry.amounts[at] + p.increment
      end
    end
  end
end

--- From a timer: charge what is owed; what fails stays owed for the next run.
function Gateway:settle()
  if self.owed_count == 0 then
    return
  end
  local ids = {} -- requests add to what is owed while a charge waits for Redis
  for id in pairs(self.owed) do
    ids[#ids + 1] = id
  end
  for _, id in ipairs(ids) do
    local entry = self.owed[id]
    local args = {}
    for i = 1, #entry.keys do
      args[#args + 1] = string.format("%d", entry.amounts[i])
      args[#args + 1] = string.format("%d", entry.capacities[i])
    end
    local _, err = self.redis:run(self.scripts.charge, entry.keys, args, 1000)
    if err then
      return -- Redis still down: try again on the next run
    end
    local now_owed = self.owed[id] -- owed meanwhile stays owed
    for i = 1, #entry.keys do
      now_owed.amounts[i] = now_owed.amounts[i] - tonumber(args[2 * i - 1])
    end
    local left = false
    for i = 1, #entry.keys do
      left = left or now_owed.amounts[i] > 0
    end
    if not left then
      self.owed[id], self.owed_count = nil, self.owed_count - 1
    end
  end
end

--- Fail open unbounded (admit) or closed (503); no bucket consulted.
function Gateway:unchecked(engine, prepared)
  local allowed = prepared.failure_mode == "open-unbounded"
  return {
    allowed = allowed,
    status = allowed and 200 or 503,
    outcome = allowed and "fail_open" or "fail_closed",
    retry_after = (not allowed) and max(self.breaker:retry_after(), 1.0) or nil,
    policy = prepared.plan.policy,
    version = engine.version,
    route = prepared.route,
    statuses = {},
    degraded = true,
    failure_mode = prepared.failure_mode,
    at = self:store_time(),
  }
end

return Gateway

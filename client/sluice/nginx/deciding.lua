-- Sluice for nginx: a request decided on Redis, as sluice/limiter.py and sluice/hot.py
-- do: the reject cache first, then one EVALSHA of token_bucket.lua (or hot.lua for
-- leases and concurrency slots), the scheduled version rehearsed in the same call.
-- These are methods of the gateway (sluice.nginx.gateway).

local answer = require "sluice.nginx.answer"
local failure = require "sluice.nginx.failure"
local hotkeys = require "sluice.nginx.hotkeys"
local rehearsals = require "sluice.nginx.rehearsal"

local max = math.max
local now_us = failure.now_us

local Gateway = {}

local function release(premature, self, held)
  local _, err = self.redis:run(self.scripts.release, held.keys, { held.member }, 1000)
  if err then
    ngx.log(ngx.WARN, "sluice: limiter.release_failed: ", err)
  end
end

--- Free the concurrency slots `held` ({keys, member}) on Redis from a timer, in `delay` s.
function Gateway:release_later(held, delay)
  ngx.timer.at(delay, release, self, held)
end

function Gateway:observe(redis_us)
  local at = redis_us / 1000000
  self.offset = at - ngx.now()
  return at
end

function Gateway:store_time()
  return self.offset and ngx.now() + self.offset or 0
end

--- Now for the rules' own times (which scheduled version is in force, whether an
--- override has expired): Redis's clock, which every gateway shares, so gateways
--- whose clocks disagree enforce the same rules at the same moment. The worker's
--- own clock (plus the `clock_offset` option, a test's skewed gateway) serves only
--- until Redis has told its time: asked at start (`ask_time`) and in every reply.
function Gateway:rules_time()
  local offset = self.offset
  if offset then
    return ngx.now() + offset
  end
  return ngx.now() + (self.options.clock_offset or 0)
end

--- Ask Redis its time until it has told it once (a timer at start, then each poll).
function Gateway:ask_time()
  if self.offset then
    return
  end
  local seconds, micros = self.redis:time(1000)
  if seconds then
    self:observe(seconds * 1000000 + micros)
  end
end

function Gateway:decide(engine, prepared)
  local plan = prepared.plan
  local cached = self.rejections:check(plan, prepared.keys, now_us())
  if cached then
    return self:cached_rejection(engine, prepared, cached)
  end
  local breaker = self.breaker
  if not breaker:allow() then
    return self:failover(engine, prepared, "circuit open")
  end
  if plan.hot then
    return self:decide_hot(engine, prepared)
  end
  local rehearsal = prepared.rehearsal
  local called, args = prepared.keys, plan.args
  if rehearsal then -- the same call: one round trip, one slot
    called = { unpack(prepared.keys) }
    for _, key in ipairs(rehearsal.keys) do
      called[#called + 1] = key
    end
    args = rehearsal.plan.args
  end
  local reply, err = self.redis:run(self.scripts.token_bucket, called, args)
  if not reply then
    breaker:failed(err)
    return self:failover(engine, prepared, err)
  end
  breaker:succeeded()
  self.rejections:remember(plan, prepared.keys, reply, now_us(), 2)
  local decision = answer.decision(engine, prepared, plan, reply, self:observe(reply[#reply]))
  if rehearsal then
    decision.rehearsed = rehearsals.rehearsed(rehearsal.plan, reply, 2)
  end
  return decision
end

function Gateway:cached_rejection(engine, prepared, reply)
  local plan = prepared.plan
  local at = self:store_time()
  local now = math.floor((at > 0 and at or ngx.now()) * 1000000 + 0.5)
  local statuses = answer.bucket_statuses(plan, prepared.keys, reply, 2, now)
  for i, status in ipairs(statuses) do
    if reply[2 * i + 1] < 0 then
      status.remaining, status.reset = -1, 0
    end
  end
  for i, slot in ipairs(plan.slots) do
    local most, count = slot.limit.max_inflight, self.rejections.inflight[prepared.slots[i]]
    statuses[#statuses + 1] = {
      name = slot.name, limit = slot.limit, key = prepared.slots[i], quota = most, window = 0, fits = true,
      remaining = count == nil and -1 or max(0, most - count), reset = 0, retry_after = 0,
      shadow = slot.shadow, concurrent = true,
    }
  end
  return answer.conclude(engine, prepared, plan, statuses, false, at)
end

--- Spend leased tokens; the decision when Redis is not needed, else nil and the call.
function Gateway:hot_begin(engine, prepared, now)
  local plan = prepared.plan
  local roles, debts, all_paid = {}, {}, true
  for i, p in ipairs(plan.limits) do
    local role, debt = false, 0
    if p.lease > 0 then
      role, debt = self.leases:take(prepared.keys[i], p.increment, now)
    end
    roles[i], debts[i] = role, debt
    all_paid = all_paid and role == hotkeys.PAID
  end
  if #prepared.slots == 0 and all_paid then
    local reply = { 1 }
    for i = 1, #plan.limits do
      reply[#reply + 1] = 1
      reply[#reply + 1] = debts[i]
    end
    return answer.decision(engine, prepared, plan, reply, self:store_time())
  end
  self.counter = self.counter + 1
  local member = self.prefix .. self.counter
  local rehearsal = prepared.rehearsal -- never with leases: roles are all false then
  local buckets = rehearsal and rehearsal.plan.args or plan.args
  local count = #buckets / 3
  local args = { member, tostring(count) }
  for i = 1, count do
    local base, want, p = 3 * (i - 1), "1", plan.limits[i]
    if roles[i] == hotkeys.PAID then
      want = "0"
    elseif roles[i] == hotkeys.REFILL then
      want = tostring(p.lease)
    end
    args[#args + 1] = buckets[base + 1]
    args[#args + 1] = buckets[base + 2]
    args[#args + 1] = buckets[base + 3]
    args[#args + 1] = want
  end
  for _, slot in ipairs(plan.slots) do
    args[#args + 1] = slot.args[1]
    args[#args + 1] = slot.args[2]
    args[#args + 1] = slot.args[3]
  end
  local called = { unpack(prepared.keys) }
  for _, key in ipairs(rehearsal and rehearsal.keys or {}) do
    called[#called + 1] = key
  end
  for _, key in ipairs(prepared.slots) do
    called[#called + 1] = key
  end
  return nil, { keys = called, args = args, roles = roles, member = member }
end

function Gateway:settle_leases(prepared, call, reply, admitted, now)
  for i, p in ipairs(prepared.plan.limits) do
    local role = call.roles[i]
    if role then
      local granted, debt
      if reply then
        granted, debt = reply[3 * i + 1], reply[3 * i]
      end
      self.leases:settle(prepared.keys[i], role, p.increment, admitted, granted, debt, now,
        p.lease_us)
    end
  end
end

function Gateway:decide_hot(engine, prepared)
  local plan = prepared.plan
  local decided, call = self:hot_begin(engine, prepared, now_us())
  if decided then
    return decided
  end
  local reply, err = self.redis:run(self.scripts.hot, call.keys, call.args)
  if not reply then
    self.breaker:failed(err)
    self:settle_leases(prepared, call, nil, false, now_us())
    if #prepared.slots > 0 then -- sent, so it may have run: release later
      self:release_later({ keys = prepared.slots, member = call.member }, 1)
    end
    return self:failover(engine, prepared, err)
  end
  self.breaker:succeeded()
  local admitted = reply[1] == 1
  local offset = 2 + 3 * (#call.keys - #prepared.slots) -- rehearsed buckets too
  local now = now_us()
  self:settle_leases(prepared, call, reply, admitted, now)
  self.rejections:remember(plan, prepared.keys, reply, now, 3)
  if not admitted then
    self.rejections:remember_slots(prepared.slots, reply, offset)
  end
  local statuses = answer.bucket_statuses(plan, prepared.keys, reply, 3)
  answer.slot_statuses(plan, prepared.slots, reply, offset, statuses)
  local at = self:observe(reply[#reply])
  local decision = answer.conclude(engine, prepared, plan, statuses, admitted, at)
  if prepared.rehearsal then
    decision.rehearsed = rehearsals.rehearsed(prepared.rehearsal.plan, reply, 3)
  end
  if admitted then
    local taken = {}
    for i, key in ipairs(prepared.slots) do
      if reply[offset + 2 * (i - 1)] == 1 then
        taken[#taken + 1] = key
      end
    end
    if #taken > 0 then
      decision.held = { keys = taken, member = call.member }
    end
  end
  return decision
end

return Gateway

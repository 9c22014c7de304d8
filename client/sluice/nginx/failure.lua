-- Sluice for nginx: what a worker needs when Redis fails, as sluice/failure.py: the
-- circuit breaker, and the in-process buckets and slots the failure modes decide with.
--
-- All of it is per worker process (each worker is one gateway process of the
-- Python model): times are integer microseconds of ngx.now().

local floor, max, min = math.floor, math.max, math.min

local _M = {}

local function now_us()
  return floor(ngx.now() * 1000000)
end
_M.now_us = now_us

-- The circuit breaker -------------------------------------------------------------

local Breaker = {}
Breaker.__index = Breaker

--- Opens when, over the last `window` s, at least `min_calls` calls ended and
--- `failure_rate` of them failed; then one probe per cooldown (doubling up to
--- `max_cooldown` once open for `patience`), closed again by a good call.
function _M.breaker(options)
  options = options or {}
  return setmetatable({
    failure_rate = options.failure_rate or 0.5,
    min_calls = options.min_calls or 20,
    window = options.window or 1.0,
    cooldown = options.cooldown or 0.1,
    max_cooldown = options.max_cooldown or 1.0,
    patience = options.patience or 1.0,
    state = "closed",
    opened_at = 0, down_since = 0, wait = options.cooldown or 0.1,
    calls = {}, -- [slice] = {ended, failed}, slices of window / 10
  }, Breaker)
end

function Breaker:count(failed)
  local slice = floor(ngx.now() * 10 / self.window)
  local cell = self.calls[slice % 10]
  if cell == nil or cell[1] ~= slice then
    cell = { slice, 0, 0 }
    self.calls[slice % 10] = cell
  end
  cell[2] = cell[2] + 1
  if failed then
    cell[3] = cell[3] + 1
  end
end

function Breaker:counts()
  local newest = floor(ngx.now() * 10 / self.window)
  local calls, failures = 0, 0
  for _, cell in pairs(self.calls) do
    if newest - cell[1] < 10 then
      calls, failures = calls + cell[2], failures + cell[3]
    end
  end
  return calls, failures
end

function Breaker:retry_after()
  if self.state == "closed" then
    return 0
  end
  return max(0, self.opened_at + self.wait - ngx.now())
end

function Breaker:allow()
  if self.state == "closed" then
    return true
  end
  if self:retry_after() == 0 then
    self.state, self.opened_at = "half_open", ngx.now()
    return true
  end
  return false
end

function Breaker:open(wait)
  self.state, self.opened_at, self.wait = "open", ngx.now(), wait
end

function Breaker:succeeded()
  if self.state ~= "closed" then
    ngx.log(ngx.NOTICE, "sluice: limiter.store_up: Redis answers again; circuit closed")
    self.state, self.wait, self.calls = "closed", self.cooldown, {}
  end
  self:count(false)
end

function Breaker:failed(err)
  self:count(true)
  if self.state == "half_open" then
    local patient = ngx.now() - self.down_since < self.patience
    self:open(patient and self.wait or min(self.max_cooldown, 2 * self.wait))
  elseif self.state == "closed" then
    local calls, failures = self:counts()
    if calls >= self.min_calls and failures >= self.failure_rate * calls then
      self.down_since = ngx.now()
      self:open(self.cooldown)
      ngx.log(ngx.WARN, "sluice: limiter.store_down: ", err, "; circuit open")
    end
  end
end

-- In-process buckets and slots (the open and local modes) ----------------------------

local LocalBuckets = {}
LocalBuckets.__index = LocalBuckets

function _M.local_buckets(gateways, max_keys)
  return setmetatable({ gateways = gateways, max_keys = max_keys or 100000, tats = {}, count = 0 },
    LocalBuckets)
end

--- Decide like the script with `plan`'s geometry; the same reply shape. `owed`: per
--- key, µs of debt Redis last reported (a bucket never starts fuller than that).
function LocalBuckets:decide(keys, plan, owed)
  local now = now_us()
  local debts, fits, admitted = {}, {}, true
  for i, p in ipairs(plan.limits) do
    local debt = max(0, (self.tats[keys[i]] or now) - now)
    if owed then
      debt = max(debt, owed[i])
    end
    debts[i] = debt
    fits[i] = debt + p.increment <= p.capacity
    if not fits[i] and not p.shadow then
      admitted = false
    end
  end
  local reply = { admitted and 1 or 0 }
  for i, p in ipairs(plan.limits) do
    local debt = debts[i]
    if admitted and fits[i] then
      debt = debt + p.increment
      if self.tats[keys[i]] == nil then
        self.count = self.count + 1
        if self.count > self.max_keys then -- forgotten buckets are full: within a burst
          self.tats, self.count = {}, 1
        end
      end
      self.tats[keys[i]] = now + debt
    end
    reply[#reply + 1] = fits[i] and 1 or 0
    reply[#reply + 1] = debt
  end
  return reply
end

local LocalSlots = {}
LocalSlots.__index = LocalSlots

function _M.local_slots(gateways)
  return setmetatable({ gateways = gateways, counts = {} }, LocalSlots)
end

--- Take a slot of every cap that has room; {admitted, per slot: fits, in flight after}.
function LocalSlots:acquire(plan, keys, share)
  local counts, room, admitted = {}, {}, true
  for i, slot in ipairs(plan.slots) do
    counts[i] = self.counts[keys[i]] or 0
    room[i] = counts[i] < max(1, floor(slot.limit.max_inflight / share))
    if not room[i] and not slot.shadow then
      admitted = false
    end
  end
  local reply = { admitted and 1 or 0 }
  for i, key in ipairs(keys) do
    local count = counts[i]
    if admitted and room[i] then
      count = count + 1
      self.counts[key] = count
    end
    reply[#reply + 1] = room[i] and 1 or 0
    reply[#reply + 1] = count
  end
  return reply
end

function LocalSlots:release(keys)
  for _, key in ipairs(keys) do
    local count = (self.counts[key] or 0) - 1
    self.counts[key] = count > 0 and count or nil
  end
end

return _M

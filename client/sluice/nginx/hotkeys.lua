-- Sluice for nginx: hot keys in a worker, as sluice/hotkeys.py: the cache of rejected
-- buckets, and leased tokens. Both only ever hold what Redis said. Per worker
-- process (each is one gateway process of the Python model); times are integer
-- microseconds of ngx.now().

local max = math.max

local _M = {}

-- The reject cache ----------------------------------------------------------------

local RejectCache = {}
RejectCache.__index = RejectCache

function _M.reject_cache(max_keys)
  return setmetatable({
    max_keys = max_keys or 100000,
    -- bucket key -> when the request it rejected fits (µs), and that request's
    -- increment (its cost in the key's units): costlier ones are rejected until then
    entries = {}, charges = {}, entry_count = 0,
    seen = {}, seen_count = 0, -- bucket key -> its TAT at the last reply (µs)
    inflight = {}, -- slot key -> requests in flight then
  }, RejectCache)
end

function RejectCache:clear()
  self.entries, self.charges, self.entry_count = {}, {}, 0
  self.seen, self.seen_count = {}, 0
  self.inflight = {}
end

--- Note what a reply said (`step` values per bucket): every bucket's debt and,
--- for a rejection, when the request fits each enforcing bucket it did not fit,
--- and its increment there (a sliding window's or a quota's rejected state
--- depends on the cost: it says nothing of a cheaper request). A bucket this
--- request fit is forgotten as rejecting: its state moved on, the next costlier
--- request asks Redis.
function RejectCache:remember(plan, keys, reply, now, step)
  if self.max_keys == 0 then
    return
  end
  if self.seen_count >= 2 * self.max_keys or self.entry_count >= self.max_keys then
    self:clear()
  end
  local entries = self.entries
  for i, key in ipairs(keys) do
    if self.seen[key] == nil then
      self.seen_count = self.seen_count + 1
    end
    local at = step * (i - 1) + 2
    self.seen[key] = now + reply[at + 1]
    if reply[at] == 1 and entries[key] ~= nil then
      entries[key], self.charges[key] = nil, nil
      self.entry_count = self.entry_count - 1
    end
  end
  if reply[1] == 1 then
    return
  end
  for i, p in ipairs(plan.limits) do
    local at = step * (i - 1) + 2
    if reply[at] ~= 1 and not p.shadow then
      if self.entries[keys[i]] == nil then
        self.entry_count = self.entry_count + 1
      end
      -- the wait, as answer.lua reads it: every kind's state is a bucket's debt
      self.entries[keys[i]] = now + max(0, reply[at + 1] + p.increment - p.capacity)
      self.charges[keys[i]] = p.increment
    end
  end
end

function RejectCache:remember_slots(keys, reply, offset)
  if self.max_keys > 0 then
    for i, key in ipairs(keys) do
      self.inflight[key] = reply[offset + 2 * (i - 1) + 1]
    end
  end
end

--- A rejecting reply in the token-bucket script's shape, or nil: ask Redis.
--- A bucket rejects when it rejected a request at least as costly that does not
--- fit yet; its debt is then the one where this request waits as long (a lower
--- bound). A bucket the cache knows nothing of has a debt of -1.
function RejectCache:check(plan, keys, now)
  if self.entry_count == 0 then
    return nil
  end
  local reject, debts = false, {}
  for i, p in ipairs(plan.limits) do
    local key = keys[i]
    local tat = self.seen[key]
    debts[i] = tat == nil and -1 or max(0, tat - now)
    local fits_at = self.entries[key]
    if fits_at ~= nil and fits_at <= now then
      self.entries[key], self.charges[key] = nil, nil
      self.entry_count = self.entry_count - 1
    elseif fits_at ~= nil and not p.shadow and p.increment >= self.charges[key] then
      reject = true
      debts[i] = fits_at - now + p.capacity - p.increment
    end
  end
  if not reject then
    return nil
  end
  local reply = { 0 }
  for i, p in ipairs(plan.limits) do
    reply[#reply + 1] = (debts[i] + p.increment <= p.capacity) and 1 or 0
    reply[#reply + 1] = debts[i]
  end
  return reply
end

--- µs of debt Redis last reported for each key, paid down since (0: unknown).
function RejectCache:owed(keys, now)
  local owed = {}
  for i, key in ipairs(keys) do
    owed[i] = max(0, (self.seen[key] or now) - now)
  end
  return owed
end

-- Leased tokens (sluice/hotkeys.py's Leases) -----------------------------------------

_M.PAID, _M.REFILL, _M.SINGLE = 0, 1, 2 -- what a request is asked of by Leases:take

local Leases = {}
Leases.__index = Leases

--- Tokens a worker took from a bucket in one call (hot.lua charged them in Redis),
--- spent in process until they run out or their lease time ends. Unspent tokens
--- are lost, never given back.
function _M.leases(max_keys)
  return setmetatable({ max_keys = max_keys or 100000, pools = {}, count = 0 }, Leases)
end

--- Spend one request of `increment` µs from the key's pool: (PAID, debt now) when
--- the pool paid, (REFILL, 0) when this request takes a new lease, (SINGLE, 0) when
--- another one is taking it (this one is decided in Redis on its own).
function Leases:take(key, increment, now)
  local pool = self.pools[key]
  if pool == nil then
    if self.count >= self.max_keys then
      self:forget(now)
    end
    pool = { balance = 0, expires = 0, debt = 0, at = 0, refilling = false }
    self.pools[key], self.count = pool, self.count + 1
  end
  if pool.expires > now and pool.balance >= increment then
    pool.balance = pool.balance - increment
    return _M.PAID, max(0, pool.debt - (now - pool.at))
  end
  if pool.refilling then
    return _M.SINGLE, 0
  end
  pool.refilling = true
  return _M.REFILL, 0
end

--- How the request that took `role` for `key` ended (see sluice/hotkeys.py).
function Leases:settle(key, role, increment, admitted, granted, debt, now, lease_us)
  local pool = self.pools[key]
  if pool == nil or role == _M.SINGLE then
    return
  end
  if role == _M.PAID then
    if not admitted then
      pool.balance = pool.balance + increment -- a rejected request consumes nothing
    end
    return
  end
  pool.refilling = false
  if admitted and granted and granted > 0 then
    pool.balance = (granted - 1) * increment
    pool.expires, pool.debt, pool.at = now + lease_us, debt, now
  end
end

function Leases:forget(now)
  for key, pool in pairs(self.pools) do
    if not pool.refilling and (pool.expires <= now or pool.balance == 0) then
      self.pools[key], self.count = nil, self.count - 1
    end
  end
end

return _M

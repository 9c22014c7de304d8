-- Sluice hot path: token buckets with leases, and concurrency slots, in one atomic call.
--
-- Buckets are those of token_bucket.lua (one integer TAT per key, in MICROSECONDS of
-- Redis server time); this script adds, per bucket, how many requests' worth to take
-- (a lease), and concurrency slots: sorted sets of request ids scored by the Redis
-- time (MILLISECONDS) at which each entry expires if it is never released.
--
-- KEYS[1 .. m]     the buckets (m = ARGV[2]); KEYS[m + 1 ..] the in-flight sets
-- ARGV[1]          the request id that holds the slots ("" when there are none)
-- ARGV[2]          m, the number of buckets
-- per bucket i, from ARGV[3], four values:
--   increment      µs of refill one request takes (cost x tick)
--   capacity       µs of a full bucket (burst x tick)
--   shadow         "0" enforced, "1" a shadow limit (evaluated and reported, never
--                  rejects), "2" a limit of a rehearsed scheduled version, "3" an
--                  enforced limit that version shares (see token_bucket.lua)
--   want           requests' worth to take: 1 normally, n for a lease, 0 for a bucket
--                  whose tokens the gateway already holds (read and reported, not charged)
-- per slot j, after the buckets, three values: max in flight, timeout (ms), shadow
--
-- Every non-shadow bucket must fit one request and every non-shadow slot must have
-- room, or no bucket is charged and no slot taken (expired slot entries are removed
-- either way). Then each fitting bucket is charged granted x increment, where
-- granted = min(want, whole requests that fit), and the request id joins every slot
-- with room; a slot key lives as long as its newest entry.
-- Rehearsed buckets ("2") never reject: they are charged when every "2" and "3"
-- bucket fits, as token_bucket.lua charges them.
--
-- Reply: {admitted, per bucket: fits, debt after (µs), granted; per slot: fits, in flight
-- after; then the Redis time of the decision (µs since the epoch)}

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = math.floor(now / 1000)
local m = tonumber(ARGV[2])
local admitted, rehearsed = 1, 1
local debts, grants, fits = {}, {}, {}

for i = 1, m do
  local base = 4 * i - 1
  local increment, capacity = tonumber(ARGV[base]), tonumber(ARGV[base + 1])
  local want = tonumber(ARGV[base + 3])
  local tat = tonumber(redis.call('GET', KEYS[i]))
  local debt = 0
  if tat and tat > now then
    debt = tat - now
  end
  local granted = math.min(want, math.floor((capacity - debt) / increment))
  fits[i] = want == 0 or granted >= 1
  local kind = ARGV[base + 2]
  if not fits[i] then
    if kind == '2' then
      rehearsed = 0
    elseif kind == '3' then
      admitted, rehearsed = 0, 0
    elseif kind ~= '1' then
      admitted = 0
    end
  end
  debts[i], grants[i] = debt, math.max(granted, 0)
end

local slots, counts, room = #KEYS - m, {}, {}
for j = 1, slots do
  local key, base = KEYS[m + j], 3 + 4 * m + 3 * (j - 1)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  counts[j] = redis.call('ZCARD', key)
  room[j] = counts[j] < tonumber(ARGV[base])
  if not room[j] and ARGV[base + 2] ~= '1' then
    admitted = 0
  end
end

local reply = {admitted}
for i = 1, m do
  local debt, granted = debts[i], grants[i]
  local charged = admitted
  if ARGV[4 * i + 1] == '2' then
    charged = rehearsed
  end
  if charged == 1 and fits[i] and granted > 0 then
    debt = debt + granted * tonumber(ARGV[4 * i - 1])
    redis.call('SET', KEYS[i], string.format('%d', now + debt), 'PX', math.ceil(debt / 1000))
  else
    granted = 0
  end
  reply[#reply + 1] = fits[i] and 1 or 0
  reply[#reply + 1] = debt
  reply[#reply + 1] = granted
end
for j = 1, slots do
  local key, base = KEYS[m + j], 3 + 4 * m + 3 * (j - 1)
  local count = counts[j]
  if admitted == 1 and room[j] then
    local timeout = tonumber(ARGV[base + 1])
    redis.call('ZADD', key, now_ms + timeout, ARGV[1])
    if redis.call('PTTL', key) < timeout then
      redis.call('PEXPIRE', key, timeout)
    end
    count = count + 1
  end
  reply[#reply + 1] = room[j] and 1 or 0
  reply[#reply + 1] = count
end
reply[#reply + 1] = now
return reply

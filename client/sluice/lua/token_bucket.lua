-- Sluice token bucket: refill, check and consume every limit of one policy, atomically.
--
-- Each bucket is one integer: its theoretical arrival time (TAT, the GCRA form of
-- a token bucket), in MICROSECONDS of Redis server time (TIME), never the
-- gateway's clock. debt = max(TAT - now, 0) is how long the bucket needs to be
-- full again; a request fits when debt + increment <= capacity.
--
-- KEYS[i]       the bucket of limit i; every key shares one hash tag (one slot)
-- ARGV[3i - 2]  increment, microseconds: request cost x tick, where
--               tick = ceil(period in microseconds / rate) is one token's refill time
-- ARGV[3i - 1]  capacity, microseconds: burst x tick (a full bucket)
-- ARGV[3i]      "0" for an enforced limit, "1" for a shadow limit (evaluated and
--               reported, never rejects), "2" for a limit of a rehearsed scheduled
--               version (its own key: never rejects, charged on its own terms),
--               "3" for an enforced limit that the rehearsed version shares
--
-- A sliding-window limit (sluice.kinds.sliding) has the same three ARGV, read
-- otherwise: ARGV[3i - 2] the request cost, ARGV[3i - 1] the limit (requests'
-- worth per window), ARGV[3i] its role as above followed by "w" and the window
-- in microseconds ("0w60000000"). Its key is a hash of two counts, fields named
-- by the window's number (now // window): this window's and the previous one's;
-- count = previous x (window - elapsed) / window + current, and a request fits
-- when count + cost <= limit. A charge adds the cost to this window's field;
-- the window's first charge also drops the field of two windows ago and
-- expires the key when this window's count stops mattering (the end of the
-- next window), so a key holds at most two fields and lives two windows at most. Its state in the reply is
-- a duration in ticks of ceil(window / limit) µs: the count x tick while a
-- request would fit, else the exact wait until it fits + (limit - cost) x tick.
--
-- A calendar quota (sluice.kinds.quota) has the same three ARGV too: the request
-- cost, the limit (requests' worth per period), and its role followed by "q" and
-- the period's bounds as the caller computed them from its clock, epoch seconds
-- "<start>:<end>:<next end>" ("0q1764547200:1767225600:1769904000"). Its key is a
-- hash: "p", the start of the period its count is of, and "n", the count; a key
-- of another period has used nothing of this one. If Redis time has passed the
-- end, the period is [end, next end) (the caller's clock lags the boundary); if
-- it has not reached the start and the key holds an earlier period, that one
-- goes on until the start (the caller's clock runs ahead). A request fits when
-- used + cost <= limit; a charge starts the period's count ("p" and "n", expiring
-- at the period's end) or adds to it. The limit is not in the key: raising it
-- mid-period keeps what was used. Its state in the reply is a duration in ticks
-- of ceil((end - start) µs / limit) of the caller's period: used x tick while a
-- request would fit, else (end - now) + (limit - cost) x tick (the wait is the
-- rest of the period).
--
-- All enforced limits must fit, or none of them (nor any shadow one) is written.
-- When they do, every enforced or shadow limit that fits is charged, and its key
-- expires when the bucket would be full again, so memory follows active clients.
-- Rehearsed limits ("2", and "3" for the shared ones) form a decision of their
-- own, as if their version were in force: the "2" ones are charged when all of
-- them fit, whatever the enforced limits said, so their buckets fill as that
-- version's would (a shared bucket is charged as an enforced one).
--
-- Reply: {admitted (1 or 0), then per limit: fits (1 or 0), debt after the decision
-- (microseconds), then the Redis time of the decision (microseconds since the epoch)}

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local debts, fits, windows, quotas = {}, {}, {}, {}
local admitted, rehearsed = 1, 1

-- A sliding window's {previous, current, number, elapsed} counts at now.
local function counts(key, window)
  local number = math.floor(now / window)
  local fields = redis.call('HMGET', key, string.format('%d', number - 1), string.format('%d', number))
  return {tonumber(fields[1]) or 0, tonumber(fields[2]) or 0, number, now - number * window}
end

-- A calendar quota's {used, start, end (epoch s), tick (µs), same period} at now.
local function quota(key, bounds, limit)
  local first, finish, after = string.match(bounds, '(%d+):(%d+):(%d+)')
  first, finish, after = tonumber(first), tonumber(finish), tonumber(after)
  local tick = math.ceil((finish - first) * 1000000 / limit)
  local fields = redis.call('HMGET', key, 'p', 'n')
  local held = tonumber(fields[1])
  if now >= finish * 1000000 then
    first, finish = finish, after
  elseif held and held < first and now < first * 1000000 then
    first, finish = held, first
  end
  if held == first then
    return {tonumber(fields[2]) or 0, first, finish, tick, true}
  end
  return {0, first, finish, tick, false}
end

-- The state of a calendar quota (sluice.kinds.quota.quota_state).
local function quota_state(q, cost, limit)
  if q[1] + cost <= limit then
    return q[1] * q[4]
  end
  return q[3] * 1000000 - now + (limit - cost) * q[4]
end

-- The state of a sliding window (sluice.kinds.sliding.sliding_state).
local function sliding_state(c, cost, limit, window)
  local previous, current, elapsed = c[1], c[2], c[4]
  local count = previous * (window - elapsed) / window + current
  local tick = math.ceil(window / limit)
  if count + cost <= limit then
    return math.ceil(count * tick)
  end
  local room, wait = limit - cost, 0
  if current <= room then
    wait = (window - elapsed) - (room - current) * window / previous
  else
    wait = (window - elapsed) + window - room * window / current
  end
  return math.max(1, math.ceil(wait)) + room * tick
end

for i = 1, #KEYS do
  local flag = ARGV[3 * i]
  local ok
  if string.sub(flag, 2, 2) == 'q' then
    local cost, limit = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
    local q = quota(KEYS[i], string.sub(flag, 3), limit)
    ok = q[1] + cost <= limit
    flag, quotas[i], debts[i] = string.sub(flag, 1, 1), true, q
    fits[i] = ok
  elseif #flag > 1 then
    local window = tonumber(string.sub(flag, 3))
    local c = counts(KEYS[i], window)
    local cost, limit = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
    ok = c[1] * (window - c[4]) / window + c[2] + cost <= limit
    flag, windows[i], debts[i] = string.sub(flag, 1, 1), window, c
    fits[i] = ok
  else
    local tat = tonumber(redis.call('GET', KEYS[i]))
    local debt = 0
    if tat and tat > now then
      debt = tat - now
    end
    local after = debt + tonumber(ARGV[3 * i - 2])
    ok = after <= tonumber(ARGV[3 * i - 1])
    fits[i] = ok and after
    debts[i] = debt
  end
  if not ok then
    if flag == '2' then
      rehearsed = 0
    elseif flag == '3' then
      admitted, rehearsed = 0, 0
    elseif flag ~= '1' then
      admitted = 0
    end
  end
end

local reply = {admitted}
for i = 1, #KEYS do
  local debt = debts[i]
  local charged = admitted
  local window = windows[i]
  if quotas[i] then
    local cost, limit = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
    if string.sub(ARGV[3 * i], 1, 1) == '2' then
      charged = rehearsed
    end
    if charged == 1 and fits[i] then
      if debt[5] then
        redis.call('HINCRBY', KEYS[i], 'n', cost)
      else -- the period's first charge
        redis.call('HSET', KEYS[i], 'p', string.format('%d', debt[2]), 'n', cost)
        redis.call('PEXPIREAT', KEYS[i], debt[3] * 1000)
      end
      debt[1] = debt[1] + cost
    end
    debt = quota_state(debt, cost, limit)
  elseif window then
    local cost, limit = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
    if string.sub(ARGV[3 * i], 1, 1) == '2' then
      charged = rehearsed
    end
    if charged == 1 and fits[i] then
      local number = debt[3]
      debt[2] = debt[2] + cost
      if redis.call('HINCRBY', KEYS[i], string.format('%d', number), cost) == cost then
        -- this window's first charge: once per window, not per request
        redis.call('HDEL', KEYS[i], string.format('%d', number - 2))
        redis.call('PEXPIREAT', KEYS[i], math.ceil((number + 2) * window / 1000))
      end
    end
    debt = sliding_state(debt, cost, limit, window)
  else
    if ARGV[3 * i] == '2' then
      charged = rehearsed
    end
    if charged == 1 and fits[i] then
      debt = fits[i]
      redis.call('SET', KEYS[i], string.format('%d', now + debt), 'PX', math.ceil(debt / 1000))
    end
  end
  reply[2 * i] = fits[i] and 1 or 0
  reply[2 * i + 1] = debt
end
reply[#reply + 1] = now
return reply

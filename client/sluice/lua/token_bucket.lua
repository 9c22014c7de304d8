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
local debts, fits = {}, {}
local admitted, rehearsed = 1, 1

for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]))
  local debt = 0
  if tat and tat > now then
    debt = tat - now
  end
  local after = debt + tonumber(ARGV[3 * i - 2])
  if after <= tonumber(ARGV[3 * i - 1]) then
    fits[i] = after
  else
    fits[i] = false
    local kind = ARGV[3 * i]
    if kind == '2' then
      rehearsed = 0
    elseif kind == '3' then
      admitted, rehearsed = 0, 0
    elseif kind ~= '1' then
      admitted = 0
    end
  end
  debts[i] = debt
end

local reply = {admitted}
for i = 1, #KEYS do
  local debt = debts[i]
  local charged = admitted
  if ARGV[3 * i] == '2' then
    charged = rehearsed
  end
  if charged == 1 and fits[i] then
    debt = fits[i]
    redis.call('SET', KEYS[i], string.format('%d', now + debt), 'PX', math.ceil(debt / 1000))
  end
  reply[2 * i] = fits[i] and 1 or 0
  reply[2 * i + 1] = debt
end
reply[#reply + 1] = now
return reply

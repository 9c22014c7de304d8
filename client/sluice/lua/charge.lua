-- Sluice: charge buckets for requests a gateway admitted without Redis (the open mode).
--
-- Buckets are those of token_bucket.lua: one integer TAT per key, in MICROSECONDS of
-- Redis server time. Each key's debt grows by what was admitted, at most to twice
-- its capacity: a bucket may owe one more burst beyond empty, so the fleet pays
-- back over-admission by rejecting a little longer, never for more than a burst's
-- refill. The key expires when the bucket would be full again.
--
-- KEYS[i]        a bucket (every key shares one hash tag: one slot)
-- ARGV[2i - 1]   µs of refill to add (admitted cost x tick)
-- ARGV[2i]       capacity, µs (burst x tick)
-- Reply: the number of keys charged

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if not tat or tat < now then
    tat = now
  end
  tat = math.min(tat + tonumber(ARGV[2 * i - 1]), now + 2 * tonumber(ARGV[2 * i]))
  redis.call('SET', KEYS[i], string.format('%d', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
end
return #KEYS

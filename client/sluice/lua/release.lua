-- Sluice: release the concurrency slots one request holds.
--
-- KEYS     the in-flight sets the request joined (one hash tag: one slot)
-- ARGV[1]  the request id
-- Reply: how many entries were removed (0 when they had already expired)

local removed = 0
for i = 1, #KEYS do
  removed = removed + redis.call('ZREM', KEYS[i], ARGV[1])
end
return removed

-- Sluice for nginx: the next scheduled version rehearsed beside the one in force, as
-- sluice/rehearsal.py: its limits sent after the enforced ones in the same EVALSHA,
-- flag "2" on keys of their own (":r<version>"), flag "3" on an enforced bucket it
-- shares; never in the answer, only in the decision events.

local _M = {}

local function bucket_id(p)
  return p.middle .. p.suffix .. "|" .. p.increment .. "|" .. p.capacity
end

local function same_buckets(active, scheduled)
  if #active.args ~= #scheduled.args or #active.limits ~= #scheduled.limits then
    return false
  end
  for i, arg in ipairs(active.args) do
    if scheduled.args[i] ~= arg then
      return false
    end
  end
  for i, p in ipairs(active.limits) do
    local q = scheduled.limits[i]
    if p.middle .. p.suffix ~= q.middle .. q.suffix then
      return false
    end
  end
  return true
end

--- The rehearsal of `scheduled` beside `active` (plans), or false when there is nothing
--- to rehearse: the same buckets, an active plan with leases, no enforced limit.
local function rehearsal_plan(active, scheduled, version)
  for _, p in ipairs(active.limits) do
    if p.lease > 0 then
      return false
    end
  end
  if same_buckets(active, scheduled) then
    return false
  end
  local wanted = {}
  for _, p in ipairs(scheduled.limits) do
    if not p.shadow then
      wanted[#wanted + 1] = p
    end
  end
  if #wanted == 0 then
    return false
  end
  local enforced = {}
  for i, p in ipairs(active.limits) do
    if not p.shadow then
      enforced[bucket_id(p)] = i - 1
    end
  end
  local shared, limits = {}, {}
  for _, p in ipairs(wanted) do
    local index = enforced[bucket_id(p)]
    if index then
      shared[#shared + 1] = index
    else
      limits[#limits + 1] = p
    end
  end
  local args = { unpack(active.args) }
  for _, index in ipairs(shared) do
    args[3 * index + 3] = "3" .. active.limits[index + 1].rest -- an enforced limit the rehearsed version shares
  end
  local reads = {}
  for i, p in ipairs(limits) do
    args[#args + 1] = p.argv[1]
    args[#args + 1] = p.argv[2]
    args[#args + 1] = "2" .. p.rest -- a rehearsed limit: never rejects
    reads[#reads + 1] = #active.limits + i - 1
  end
  for _, index in ipairs(shared) do
    reads[#reads + 1] = index
  end
  return { version = version, limits = limits, args = args, reads = reads }
end

--- What the rehearsed version said in a reply (`step` values per bucket).
function _M.rehearsed(plan, reply, step)
  for _, index in ipairs(plan.reads) do
    if reply[2 + step * index] ~= 1 then
      return { plan.version, true }
    end
  end
  return { plan.version, false }
end

--- The rehearsal of the `scheduled` plan beside the `active` one (cached on it), or false.
function _M.of(active, upcoming, scheduled)
  local cache = active.rehearsals
  local found = cache[scheduled]
  if found == nil then
    found = rehearsal_plan(active, scheduled, upcoming.version)
    cache[scheduled] = found
  end
  return found
end

return _M

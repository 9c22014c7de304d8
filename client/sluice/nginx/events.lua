-- Sluice for nginx: decision events, buffered per worker and written to the control
-- plane's Redis stream from a timer, in sluice/metrics.py's format (docs/stats.md):
--
--   XADD sluice:decisions MAXLEN ~ 100000 * v 1 gw <gateway id> dropped <n>
--        events [[epoch ms, tenant, route, policy, version, outcome, limit, count], ...]
--
-- Identical decisions of one second are counted together as they come: a request
-- pays for a few table lookups. A flush that fails keeps its records for the next
-- one; past `capacity` decisions held, new ones are dropped and counted, never
-- waited for.

local cjson = require "cjson.safe"

local floor = math.floor

local _M = { STREAM = "sluice:decisions" }

local Events = {}
Events.__index = Events

function _M.new(store, options)
  return setmetatable({
    store = store,
    gateway_id = options.gateway_id,
    stream = options.stream or _M.STREAM,
    capacity = options.capacity or 100000,
    batch = options.batch or 500,
    maxlen = options.maxlen or 100000,
    timeout = options.timeout or 1000,
    retry = {}, retry_events = 0, retry_rehearsals = {},
    dropped = 0, reported = 0, written = 0,
  }, Events):reset()
end

--- Nothing counted since the last flush.
function Events:reset()
  self.held = 0 -- decisions counted in `records`
  self.records, self.index = {}, {} -- index[second][tenant][route][policy][version][outcome][limit]
  self.rehearsals, self.rehearsal_index = {}, {} -- [second][tenant][route][version]
  return self
end

local function child(index, key)
  local found = index[key]
  if found == nil then
    found = {}
    index[key] = found
  end
  return found
end

--- Count one decision of `tenant` (nil: anonymous) into its record of the second,
--- and its rehearsal's: lookups in nested tables, no allocation once a record exists
--- (a table per request held for a second cost the worker more than the rest).
function Events:add(tenant, decision)
  if self.held + self.retry_events >= self.capacity then
    self.dropped = self.dropped + 1
    return
  end
  self.held = self.held + 1
  local limit = ""
  if decision.outcome == "limited" and decision.deciding then
    limit = decision.deciding.name
  end
  local second = floor(decision.at > 0 and decision.at or ngx.now())
  tenant = tenant or ""
  local route, policy, version = decision.route or "", decision.policy.ref, decision.version
  local outcomes = child(child(child(child(child(self.index, second), tenant), route), policy),
    version)
  local limits = child(outcomes, decision.outcome)
  local record = limits[limit]
  if record == nil then
    record = { second * 1000, tenant, route, policy, version, decision.outcome, limit, 0 }
    limits[limit] = record
    self.records[#self.records + 1] = record
  end
  record[8] = record[8] + 1
  local rehearsed = decision.rehearsed -- {version, rejected}: what a scheduled version said
  if rehearsed then
    local versions = child(child(self.rehearsal_index, second), tenant)
    local by_route = child(versions, route)
    record = by_route[rehearsed[1]]
    if record == nil then
      record = { second * 1000, tenant, route, rehearsed[1], 0, 0 }
      by_route[rehearsed[1]] = record
      self.rehearsals[#self.rehearsals + 1] = record
    end
    record[5] = record[5] + 1
    record[6] = record[6] + (rehearsed[2] and 1 or 0)
  end
end

local function append(into, records)
  for _, record in ipairs(records) do
    into[#into + 1] = record
  end
  return into
end

local function json(records)
  if #records == 0 then
    return "[]"
  end
  return cjson.encode(records)
end

--- Write what is held now; keep it for the next flush if Redis fails.
function Events:flush()
  if self.held == 0 and #self.retry == 0 and #self.retry_rehearsals == 0
    and self.dropped == self.reported then
    return
  end
  local records = append(self.retry, self.records)
  local rehearsals = append(self.retry_rehearsals, self.rehearsals)
  local held = self.retry_events + self.held
  self:reset()
  local dropped = self.dropped
  local commands = {}
  local entries = math.max(math.ceil(#records / self.batch), math.ceil(#rehearsals / self.batch), 1)
  for index = 0, entries - 1 do
    local first, last = index * self.batch + 1, (index + 1) * self.batch
    local command = {
      "xadd", self.stream, "MAXLEN", "~", self.maxlen, "*",
      "v", "1", "gw", self.gateway_id,
      "dropped", index == 0 and (dropped - self.reported) or 0,
      "events", json({ unpack(records, first, math.min(#records, last)) }),
    }
    if first <= #rehearsals then
      command[#command + 1] = "rehearsals"
      command[#command + 1] = json({ unpack(rehearsals, first, math.min(#rehearsals, last)) })
    end
    commands[#commands + 1] = command
  end
  local ok, err = self.store:pipeline(commands, self.timeout)
  if not ok then
    if self.retry_events == 0 then
      ngx.log(ngx.WARN, "sluice: decision_events.flush_failed: ", held,
        " events kept for a retry: ", err)
    end
    self.retry, self.retry_events, self.retry_rehearsals = records, held, rehearsals
    return
  end
  self.retry, self.retry_events, self.retry_rehearsals = {}, 0, {}
  self.reported = dropped
  self.written = self.written + held
end

return _M

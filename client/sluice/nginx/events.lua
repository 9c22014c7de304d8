-- Sluice for nginx: decision events, buffered per worker and written to the control
-- plane's Redis stream from a timer, in sluice/metrics.py's format (docs/stats.md):
--
--   XADD sluice:decisions MAXLEN ~ 100000 * v 1 gw <gateway id> dropped <n>
--        events [[epoch ms, tenant, route, policy, version, outcome, limit, count], ...]
--
-- A request pays for one table append. Identical decisions of one second are counted
-- together. A flush that fails keeps its records for the next one; past `capacity`
-- events held, new ones are dropped and counted, never waited for.

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
    buffer = {},
    retry = {}, retry_events = 0, retry_rehearsals = {},
    dropped = 0, reported = 0, written = 0,
  }, Events)
end

--- Buffer one decision of `tenant` (nil: anonymous).
function Events:add(tenant, decision)
  local buffer = self.buffer
  if #buffer + self.retry_events >= self.capacity then
    self.dropped = self.dropped + 1
    return
  end
  local limit = ""
  if decision.outcome == "limited" and decision.deciding then
    limit = decision.deciding.name
  end
  buffer[#buffer + 1] = {
    floor(decision.at > 0 and decision.at or ngx.now()),
    tenant or "", decision.route or "", decision.policy.ref,
    decision.version, decision.outcome, limit,
    decision.rehearsed or false, -- {version, rejected}: what a scheduled version said
  }
end

--- Rehearsal records: per second, tenant, route and rehearsed version, the requests
--- that rehearsed it and those it would have rejected.
local function count_rehearsals(events, records)
  local counts = {}
  for _, e in ipairs(events) do
    local rehearsed = e[8]
    if rehearsed then
      local key = table.concat({ e[1], e[2], e[3], rehearsed[1] }, "\0")
      local record = counts[key]
      if record == nil then
        record = { e[1] * 1000, e[2], e[3], rehearsed[1], 0, 0 }
        counts[key] = record
        records[#records + 1] = record
      end
      record[5] = record[5] + 1
      record[6] = record[6] + (rehearsed[2] and 1 or 0)
    end
  end
  return records
end

local function count(events)
  local counts, records = {}, {}
  for _, e in ipairs(events) do
    local key = table.concat(e, "\0", 1, 7)
    local record = counts[key]
    if record then
      record[8] = record[8] + 1
    else
      record = { e[1] * 1000, e[2], e[3], e[4], e[5], e[6], e[7], 1 }
      counts[key] = record
      records[#records + 1] = record
    end
  end
  return records
end

local function json(records)
  if #records == 0 then
    return "[]"
  end
  return cjson.encode(records)
end

--- Write what is held now; keep it for the next flush if Redis fails.
function Events:flush()
  local events = self.buffer
  if #events == 0 and #self.retry == 0 and #self.retry_rehearsals == 0
    and self.dropped == self.reported then
    return
  end
  self.buffer = {}
  local records = self.retry
  for _, record in ipairs(count(events)) do
    records[#records + 1] = record
  end
  local rehearsals = count_rehearsals(events, self.retry_rehearsals)
  local held = self.retry_events + #events
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

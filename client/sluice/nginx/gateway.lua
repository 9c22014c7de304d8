-- Sluice for nginx: enforcement inside nginx, with no hop (docs/gateways/nginx.md).
--
--   init_by_lua_block        { sluice = require("sluice.nginx.gateway").new({...}) }
--   init_worker_by_lua_block { sluice:start() }
--   access_by_lua_block      { sluice:access({tenant = ngx.var.http_x_tenant, ...}) }
--   header_filter_by_lua_block { sluice:header_filter() }
--   log_by_lua_block         { sluice:log() }
--
-- Per request: the snapshot in force (polled in a timer: sluice.nginx.source), the
-- same resolution as the Python client (sluice.nginx.rules), one EVALSHA of the
-- client's own script on Redis's clock (sluice.nginx.store), the route's failure
-- mode when Redis fails (sluice.nginx.failure), and the same 429 / 503 answer
-- (sluice.nginx.answer). Decision events go to the stream from a timer
-- (sluice.nginx.events). tests/conformance/ runs the Python model's corpus on it.

local answer = require "sluice.nginx.answer"
local events = require "sluice.nginx.events"
local failure = require "sluice.nginx.failure"
local keys = require "sluice.nginx.keys"
local rules = require "sluice.nginx.rules"
local source = require "sluice.nginx.source"
local store = require "sluice.nginx.store"

local floor, max = math.floor, math.max
local now_us = failure.now_us

local _M = {}

local Gateway = {}
Gateway.__index = Gateway

local MAX_VALUE = 2048
local MAX_COST = 1000000

local function here()
  local path = debug.getinfo(1, "S").source:sub(2)
  return path:match("^(.*)/[^/]*$") or "."
end

local function address(text, default_port)
  local host, port = text:match("^%[?([^%]]+)%]?:(%d+)$")
  if host then
    return host, tonumber(port)
  end
  return text, default_port
end

--- A gateway; see docs/gateways/nginx.md for the options.
function _M.new(options)
  local host, port = address(options.redis or "127.0.0.1:6379", 6379)
  local self = setmetatable({
    options = options,
    gateway_id = options.gateway_id or "nginx",
    gateways = options.gateways or 4,
    scripts = store.scripts(options.scripts or (here() .. "/../lua")),
    redis = store.new({
      host = host,
      port = port,
      db = options.redis_db,
      password = options.redis_password,
      timeout = options.redis_timeout or 5,
    }),
    engines = nil,
    current = nil,
    offset = nil, -- Redis epoch seconds minus ngx.now(), from the last reply
    counter = 0,
  }, Gateway)
  if options.events ~= false then
    local events_host, events_port = address(options.events_redis or options.redis
      or "127.0.0.1:6379", 6379)
    self.events = events.new(store.new({
      host = events_host,
      port = events_port,
      db = options.events_redis_db or options.redis_db,
      password = options.redis_password,
      timeout = 1000,
    }), { gateway_id = self.gateway_id })
  end
  return self
end

--- `work` for a timer: never two runs at once (a slow Redis or control plane
--- outlasts the interval), and a bug is a log line, never the end of the timer.
local function alone(work, event)
  local running = false
  return function()
    if running then
      return
    end
    running = true
    local ok, err = pcall(work)
    running = false
    if not ok then
      ngx.log(ngx.ERR, "sluice: ", event, ": ", err)
    end
  end
end

--- In init_worker: the last good rules (or the built-in ones), then the timers.
function Gateway:start()
  local options = self.options
  math.randomseed(floor(ngx.now() * 1000) + ngx.worker.pid())
  self.prefix = string.format("%08x:%d:", math.random(0, 0x7fffffff), ngx.worker.pid())
  self:reset_state()
  self.engines = rules.fallback(options)
  if options.control_plane then
    self.source = source.new(options, function(document)
      self:install(rules.bundle(document, options))
    end)
    self.source.rehearsing = function() -- the version it rehearses, for the fleet report
      local upcoming = rules.upcoming(self.engines, ngx.now())
      return upcoming and upcoming.version
    end
    if not self.source:load() then
      ngx.log(ngx.NOTICE, "sluice: no last good rules: the built-in strict ones apply")
    end
    local poll = alone(function()
      return self.source:poll()
    end, "snapshot.poll_crashed")
    ngx.timer.at(0, function(premature)
      if not premature then
        poll()
      end
    end)
    ngx.timer.every(options.poll_interval or 5, function(premature)
      if not premature then
        poll()
      end
    end)
  end
  ngx.timer.every(options.charge_interval or 0.5, alone(function()
    return self:settle()
  end, "limiter.charge_crashed"))
  if self.events then -- on exit too (premature): the last second's events
    ngx.timer.every(options.events_interval or 1, alone(function()
      return self.events:flush()
    end, "decision_events.flush_crashed"))
  end
end

function Gateway:reset_state()
  local options = self.options
  self.owed, self.owed_count = {}, 0 -- what the open mode admitted, owed to Redis
  self.rejections = failure.reject_cache(options.reject_cache == false and 0 or 100000)
  self.breaker = failure.breaker(options.breaker)
  self.local_buckets = failure.local_buckets(self.gateways)
  self.local_slots = failure.local_slots(self.gateways)
  self.leases = failure.leases()
end

function Gateway:install(engines)
  self.engines = engines
  if self.source then
    self.source.applied = engines[1].version
  end
  ngx.log(ngx.NOTICE, "sluice: snapshot.applied: version ", engines[1].version)
end

--- The engine in force and the next scheduled one (rehearsed beside it, or nil);
--- the reject cache is emptied when the one in force changes.
function Gateway:engine()
  local now = ngx.now()
  local engine = rules.in_force(self.engines, now)
  if engine ~= self.current then
    self.current = engine
    self.rejections:clear() -- remembered debts were judged by the old numbers
  end
  return engine, rules.upcoming(self.engines, now)
end

-- The request ------------------------------------------------------------------------

local function header_value(raw)
  if type(raw) == "table" then
    raw = raw[1]
  end
  if raw == nil then
    return nil
  end
  raw = raw:match("^%s*(.-)%s*$")
  if raw == "" or #raw > MAX_VALUE then
    return nil
  end
  return keys.utf8_of_latin1(raw)
end

local function cost_of(raw)
  raw = header_value(raw)
  if raw == nil or not raw:match("^[+-]?%d+$") then
    return nil
  end
  local cost = tonumber(raw)
  if cost < 1 or cost > MAX_COST then
    return nil
  end
  return cost
end

local function unquote(text)
  return (text:gsub("%%(%x%x)", function(hex)
    return string.char(tonumber(hex, 16))
  end))
end

--- What the request says: method, path (no query, percent-decoded), identity, cost.
function _M.identity(given)
  local target = ngx.var.request_uri or "/"
  local path = unquote(target:match("^[^?#]*"))
  return {
    method = (given.method or ngx.req.get_method()):upper(),
    path = path ~= "" and path or "/",
    tenant = header_value(given.tenant),
    user = header_value(given.user),
    api_key = header_value(given.api_key),
    ip = given.ip or ngx.var.remote_addr,
    cost = cost_of(given.cost),
  }
end

--- Decide the request in access_by_lua; answer 429 / 503 here, or let it through.
function Gateway:access(given)
  local who = _M.identity(given or {})
  local engine, upcoming = self:engine()
  local prepared = engine:prepare(who, ngx.now(), upcoming)
  local decision = self:decide(engine, prepared)
  if self.events then
    self.events:add(who.tenant, decision)
  end
  local ctx = ngx.ctx
  if decision.allowed then
    ctx.sluice_policy, ctx.sluice_state = answer.rate_limit_fields(decision)
    if self.options.github_headers and ctx.sluice_policy then
      ctx.sluice_github = { answer.github_fields(decision) }
    end
    ctx.sluice_held = decision.held
    return
  end
  return self:reject(decision)
end

local function set_github(fields)
  if fields and fields[1] then
    ngx.header["X-RateLimit-Limit"] = fields[1]
    ngx.header["X-RateLimit-Remaining"] = fields[2]
    ngx.header["X-RateLimit-Reset"] = fields[3]
  end
end

function Gateway:reject(decision)
  local seconds = answer.retry_after_seconds(decision, self.options.retry_jitter)
  local body = answer.problem(decision, seconds)
  ngx.status = decision.status
  ngx.header["Content-Type"] = "application/problem+json"
  ngx.header["Retry-After"] = seconds
  local policy, state = answer.rate_limit_fields(decision)
  if policy then
    ngx.header["RateLimit-Policy"] = policy
    ngx.header["RateLimit"] = state
    if self.options.github_headers then
      set_github({ answer.github_fields(decision) })
    end
  end
  ngx.header["Content-Length"] = #body
  ngx.print(body)
  return ngx.exit(ngx.HTTP_OK)
end

--- In header_filter_by_lua: the RateLimit fields on an admitted request's response.
function Gateway:header_filter()
  local ctx = ngx.ctx
  if ctx.sluice_policy then
    ngx.header["RateLimit-Policy"] = ctx.sluice_policy
    ngx.header["RateLimit"] = ctx.sluice_state
    set_github(ctx.sluice_github)
  end
end

local function release(premature, self, held)
  local _, err = self.redis:run(self.scripts.release, held.keys, { held.member }, 1000)
  if err then
    ngx.log(ngx.WARN, "sluice: limiter.release_failed: ", err)
  end
end

--- In log_by_lua: the request has ended; free the concurrency slots it holds.
function Gateway:log()
  local held = ngx.ctx.sluice_held
  if held == nil then
    return
  end
  if held.local_slots then
    self.local_slots:release(held.keys)
  else
    ngx.timer.at(0, release, self, held)
  end
end

-- Deciding -----------------------------------------------------------------------

function Gateway:observe(redis_us)
  local at = redis_us / 1000000
  self.offset = at - ngx.now()
  return at
end

function Gateway:store_time()
  return self.offset and ngx.now() + self.offset or 0
end

function Gateway:decide(engine, prepared)
  local plan = prepared.plan
  local cached = self.rejections:check(plan, prepared.keys, now_us())
  if cached then
    return self:cached_rejection(engine, prepared, cached)
  end
  local breaker = self.breaker
  if not breaker:allow() then
    return self:failover(engine, prepared, "circuit open")
  end
  if plan.hot then
    return self:decide_hot(engine, prepared)
  end
  local rehearsal = prepared.rehearsal
  local called, args = prepared.keys, plan.args
  if rehearsal then -- the same call: one round trip, one slot
    called = { unpack(prepared.keys) }
    for _, key in ipairs(rehearsal.keys) do
      called[#called + 1] = key
    end
    args = rehearsal.plan.args
  end
  local reply, err = self.redis:run(self.scripts.token_bucket, called, args)
  if not reply then
    breaker:failed(err)
    return self:failover(engine, prepared, err)
  end
  breaker:succeeded()
  self.rejections:remember(plan, prepared.keys, reply, now_us(), 2)
  local decision = answer.decision(engine, prepared, plan, reply, self:observe(reply[#reply]))
  if rehearsal then
    decision.rehearsed = rules.rehearsed(rehearsal.plan, reply, 2)
  end
  return decision
end

function Gateway:cached_rejection(engine, prepared, reply)
  local plan = prepared.plan
  local statuses = answer.bucket_statuses(plan, prepared.keys, reply, 2)
  for i, status in ipairs(statuses) do
    if reply[2 * i + 1] < 0 then
      status.remaining, status.reset = -1, 0
    end
  end
  for i, slot in ipairs(plan.slots) do
    local most, count = slot.limit.max_inflight, self.rejections.inflight[prepared.slots[i]]
    statuses[#statuses + 1] = {
      name = slot.name, key = prepared.slots[i], quota = most, window = 0, fits = true,
      remaining = count == nil and -1 or max(0, most - count), reset = 0, retry_after = 0,
      shadow = slot.shadow, concurrent = true,
    }
  end
  return answer.conclude(engine, prepared, plan, statuses, false, self:store_time())
end

--- Spend leased tokens; the decision when Redis is not needed, else nil and the call.
function Gateway:hot_begin(engine, prepared, now)
  local plan = prepared.plan
  local roles, debts, all_paid = {}, {}, true
  for i, p in ipairs(plan.limits) do
    local role, debt = false, 0
    if p.lease > 0 then
      role, debt = self.leases:take(prepared.keys[i], p.increment, now)
    end
    roles[i], debts[i] = role, debt
    all_paid = all_paid and role == failure.PAID
  end
  if #prepared.slots == 0 and all_paid then
    local reply = { 1 }
    for i = 1, #plan.limits do
      reply[#reply + 1] = 1
      reply[#reply + 1] = debts[i]
    end
    return answer.decision(engine, prepared, plan, reply, self:store_time())
  end
  self.counter = self.counter + 1
  local member = self.prefix .. self.counter
  local rehearsal = prepared.rehearsal -- never with leases: roles are all false then
  local buckets = rehearsal and rehearsal.plan.args or plan.args
  local count = #buckets / 3
  local args = { member, tostring(count) }
  for i = 1, count do
    local base, want, p = 3 * (i - 1), "1", plan.limits[i]
    if roles[i] == failure.PAID then
      want = "0"
    elseif roles[i] == failure.REFILL then
      want = tostring(p.lease)
    end
    args[#args + 1] = buckets[base + 1]
    args[#args + 1] = buckets[base + 2]
    args[#args + 1] = buckets[base + 3]
    args[#args + 1] = want
  end
  for _, slot in ipairs(plan.slots) do
    args[#args + 1] = slot.args[1]
    args[#args + 1] = slot.args[2]
    args[#args + 1] = slot.args[3]
  end
  local called = { unpack(prepared.keys) }
  for _, key in ipairs(rehearsal and rehearsal.keys or {}) do
    called[#called + 1] = key
  end
  for _, key in ipairs(prepared.slots) do
    called[#called + 1] = key
  end
  return nil, { keys = called, args = args, roles = roles, member = member }
end

function Gateway:settle_leases(prepared, call, reply, admitted, now)
  for i, p in ipairs(prepared.plan.limits) do
    local role = call.roles[i]
    if role then
      local granted, debt
      if reply then
        granted, debt = reply[3 * i + 1], reply[3 * i]
      end
      self.leases:settle(prepared.keys[i], role, p.increment, admitted, granted, debt, now,
        p.lease_us)
    end
  end
end

function Gateway:decide_hot(engine, prepared)
  local plan = prepared.plan
  local decided, call = self:hot_begin(engine, prepared, now_us())
  if decided then
    return decided
  end
  local reply, err = self.redis:run(self.scripts.hot, call.keys, call.args)
  if not reply then
    self.breaker:failed(err)
    self:settle_leases(prepared, call, nil, false, now_us())
    if #prepared.slots > 0 then -- sent, so it may have run: release later
      ngx.timer.at(1, release, self, { keys = prepared.slots, member = call.member })
    end
    return self:failover(engine, prepared, err)
  end
  self.breaker:succeeded()
  local admitted = reply[1] == 1
  local offset = 2 + 3 * (#call.keys - #prepared.slots) -- rehearsed buckets too
  local now = now_us()
  self:settle_leases(prepared, call, reply, admitted, now)
  self.rejections:remember(plan, prepared.keys, reply, now, 3)
  if not admitted then
    self.rejections:remember_slots(prepared.slots, reply, offset)
  end
  local statuses = answer.bucket_statuses(plan, prepared.keys, reply, 3)
  answer.slot_statuses(plan, prepared.slots, reply, offset, statuses)
  local at = self:observe(reply[#reply])
  local decision = answer.conclude(engine, prepared, plan, statuses, admitted, at)
  if prepared.rehearsal then
    decision.rehearsed = rules.rehearsed(prepared.rehearsal.plan, reply, 3)
  end
  if admitted then
    local taken = {}
    for i, key in ipairs(prepared.slots) do
      if reply[offset + 2 * (i - 1)] == 1 then
        taken[#taken + 1] = key
      end
    end
    if #taken > 0 then
      decision.held = { keys = taken, member = call.member }
    end
  end
  return decision
end

-- Failure modes --------------------------------------------------------------------

function Gateway:failover(engine, prepared, err)
  local mode = prepared.failure_mode
  local share, admitted_as
  if mode == "local" then
    share, admitted_as = self.gateways, "local"
  elseif mode == "open" then
    share, admitted_as = 1, "fail_open"
  else
    return self:unchecked(engine, prepared)
  end
  local owed
  if self.rejections.seen_count > 0 then
    owed = self.rejections:owed(prepared.keys, now_us())
  end
  local decision = self:decide_locally(engine, prepared, share, owed)
  if decision.allowed then
    decision.outcome = admitted_as
    if mode == "open" then
      self:owe(prepared, decision)
    end
  end
  decision.degraded = true
  decision.error = err
  return decision
end

function Gateway:decide_locally(engine, prepared, share, owed)
  local plan = prepared.plan
  if share ~= 1 then
    plan = engine:plan(plan.policy, prepared.cost, share)
  end
  local at = self:store_time()
  local function buckets()
    local reply = self.local_buckets:decide(prepared.keys, plan, owed)
    return answer.decision(engine, prepared, plan, reply, at)
  end
  if #prepared.slots == 0 then
    return buckets()
  end
  local reply = self.local_slots:acquire(plan, prepared.slots, share)
  local taken = {}
  for i, key in ipairs(prepared.slots) do
    if reply[2 * i] == 1 then
      taken[#taken + 1] = key
    end
  end
  local slots = answer.slot_statuses(plan, prepared.slots, reply, 2, {})
  if reply[1] ~= 1 then
    return answer.conclude(engine, prepared, plan, slots, false, at)
  end
  local decision = buckets()
  if not decision.allowed then
    self.local_slots:release(taken)
    return decision
  end
  local statuses = decision.statuses
  for _, s in ipairs(slots) do
    statuses[#statuses + 1] = s
  end
  decision = answer.conclude(engine, prepared, plan, statuses, true, at)
  if #taken > 0 then
    decision.held = { keys = taken, local_slots = true }
  end
  return decision
end

local MAX_OWED = 10000

--- Owe Redis what the local buckets just admitted (the limits that fit), so the
--- fleet pays back over-admission once Redis answers (charge.lua, as sluice/backlog.py).
function Gateway:owe(prepared, decision)
  local id = table.concat(prepared.keys, "\n")
  local entry = self.owed[id]
  if entry == nil then
    if self.owed_count >= MAX_OWED then
      return -- past the bound, over-admission is not paid back
    end
    entry = { keys = prepared.keys, amounts = {}, capacities = {} }
    for i, p in ipairs(prepared.plan.limits) do
      entry.amounts[i], entry.capacities[i] = 0, p.capacity
    end
    self.owed[id], self.owed_count = entry, self.owed_count + 1
  end
  for i, p in ipairs(prepared.plan.limits) do
    if decision.statuses[i].fits then
      entry.amounts[i] = entry.amounts[i] + p.increment
    end
  end
end

--- From a timer: charge what is owed; what fails stays owed for the next run.
function Gateway:settle()
  if self.owed_count == 0 then
    return
  end
  local ids = {} -- requests add to what is owed while a charge waits for Redis
  for id in pairs(self.owed) do
    ids[#ids + 1] = id
  end
  for _, id in ipairs(ids) do
    local entry = self.owed[id]
    local args = {}
    for i = 1, #entry.keys do
      args[#args + 1] = string.format("%d", entry.amounts[i])
      args[#args + 1] = string.format("%d", entry.capacities[i])
    end
    local _, err = self.redis:run(self.scripts.charge, entry.keys, args, 1000)
    if err then
      return -- Redis still down: try again on the next run
    end
    local now_owed = self.owed[id] -- owed meanwhile stays owed
    for i = 1, #entry.keys do
      now_owed.amounts[i] = now_owed.amounts[i] - tonumber(args[2 * i - 1])
    end
    local left = false
    for i = 1, #entry.keys do
      left = left or now_owed.amounts[i] > 0
    end
    if not left then
      self.owed[id], self.owed_count = nil, self.owed_count - 1
    end
  end
end

--- Fail open unbounded (admit) or closed (503); no bucket consulted.
function Gateway:unchecked(engine, prepared)
  local allowed = prepared.failure_mode == "open-unbounded"
  return {
    allowed = allowed,
    status = allowed and 200 or 503,
    outcome = allowed and "fail_open" or "fail_closed",
    retry_after = (not allowed) and max(self.breaker:retry_after(), 1.0) or nil,
    policy = prepared.plan.policy,
    version = engine.version,
    route = prepared.route,
    statuses = {},
    degraded = true,
    at = self:store_time(),
  }
end

return _M

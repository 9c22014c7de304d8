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
-- client's own script on Redis's clock (sluice.nginx.deciding, .store), the route's
-- failure mode when Redis fails (sluice.nginx.degraded), and the same 429 / 503
-- answer (sluice.nginx.answer). Decision events go to the stream from a timer
-- (sluice.nginx.events). tests/conformance/ runs the Python model's corpus on it.

local answer = require "sluice.nginx.answer"
local events = require "sluice.nginx.events"
local failure = require "sluice.nginx.failure"
local hotkeys = require "sluice.nginx.hotkeys"
local keys = require "sluice.nginx.keys"
local rules = require "sluice.nginx.rules"
local signing = require "sluice.nginx.signing"
local source = require "sluice.nginx.source"
local store = require "sluice.nginx.store"

local floor = math.floor

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
      timeout = options.redis_timeout or 50,
      pipelining = options.redis_pipelining,
    }),
    engines = nil,
    current = nil,
    offset = nil, -- Redis epoch seconds minus ngx.now(), from the last reply
    counter = 0,
  }, Gateway)
  if options.control_plane then -- read here, in the master: a missing file stops nginx
    local path = options.public_keys
    if not path then
      error("sluice: public_keys is required: the control plane's sluice-keys.json, saved")
    end
    self.keys = signing.load(path:sub(1, 1) == "/" and path or ngx.config.prefix() .. path)
  end
  if options.events ~= false then
    local events_host, events_port = address(options.events_redis or options.redis
      or "127.0.0.1:6379", 6379)
    self.events = events.new(store.new({
      host = events_host,
      port = events_port,
      db = options.events_redis_db or options.redis_db,
      password = options.redis_password,
      timeout = 1000,
      pipelining = false, -- its own batches, from its own timer
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
  self.redis:start()
  self.engines = rules.fallback(options)
  local ask_time = alone(function()
    return self:ask_time()
  end, "limiter.time_crashed")
  ngx.timer.at(0, function(premature)
    if not premature then
      ask_time()
    end
  end)
  if options.control_plane then
    self.source = source.new(options, function(document)
      self:install(rules.bundle(document, options))
    end, self.keys)
    self.source.rehearsing = function() -- the version it rehearses, for the fleet report
      local upcoming = rules.upcoming(self.engines, self:rules_time())
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
        ask_time()
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
  self.rejections = hotkeys.reject_cache(options.reject_cache == false and 0 or 100000)
  self.breaker = failure.breaker(options.breaker)
  self.local_buckets = failure.local_buckets(self.gateways)
  self.local_slots = failure.local_slots(self.gateways)
  self.leases = hotkeys.leases()
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
  local now = self:rules_time()
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

local function byte_of(hex)
  return string.char(tonumber(hex, 16))
end

local function unquote(text)
  if not text:find("%", 1, true) then -- most paths: no closure, no gsub
    return text
  end
  return (text:gsub("%%(%x%x)", byte_of))
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

local refused = {} -- refusals of a declared cost already logged at WARN (per worker)

--- Log a declared cost the rules did not take: WARN the first time per reason, then
--- DEBUG, so a misconfigured gateway cannot flood the log (as sluice/engine.py).
local function bad_cost(prepared)
  local reason = prepared.cost_refusal
  ngx.log(refused[reason] and ngx.DEBUG or ngx.WARN, "sluice: limiter.bad_input: ",
    reason, ": ", prepared.declared_cost, " on route ", prepared.route or "(none)")
  refused[reason] = true
end

--- Decide the request in access_by_lua; answer 429 / 503 here, or let it through.
function Gateway:access(given)
  local who = _M.identity(given or {})
  local engine, upcoming = self:engine()
  local prepared = engine:prepare(who, self:rules_time(), upcoming)
  if prepared.cost_refusal then
    bad_cost(prepared)
  end
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
    ctx.sluice_degraded = decision.degraded and decision.failure_mode or nil
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
  if decision.degraded then
    ngx.header["Sluice-Degraded"] = decision.failure_mode
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
  if ctx.sluice_degraded then
    ngx.header["Sluice-Degraded"] = ctx.sluice_degraded
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
    self:release_later(held, 0)
  end
end

for name, method in pairs(require "sluice.nginx.deciding") do
  Gateway[name] = method
end
for name, method in pairs(require "sluice.nginx.degraded") do
  Gateway[name] = method
end

return _M

-- Sluice for nginx: a snapshot's rules as lookups, the same resolution as the Python
-- client (sluice/routing.py, resolver.py, plans.py, bucket.py, engine.py).
--
-- An engine is built once per snapshot: the route tree (literal segments before
-- parameters, HEAD answered as GET), the index of policies by (scope, route), and
-- compiled plans per (policy, cost, share). A request then costs a few table
-- look-ups and string concatenations. tests/conformance/ holds this to the Python
-- model: the corpus it generates is run against this module in the suite.

local calendar = require "sluice.nginx.calendar"
local canonical = require "sluice.nginx.canonical"
local cjson = require "cjson.safe"
local keys = require "sluice.nginx.keys"
local plans = require "sluice.nginx.plans"
local rehearsals = require "sluice.nginx.rehearsal"
local routing = require "sluice.nginx.routing"

local ceil, floor, max = math.ceil, math.floor, math.max
local null = cjson.null

local _M = {}

local PERIODS = plans.PERIODS

local function value(v)
  if v == null then
    return nil
  end
  return v
end

-- "2026-12-01T08:00:00Z" -> epoch seconds
local function epoch(text)
  if text == nil or text == null then
    return nil
  end
  local y, mo, d, h, mi, s = text:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z$")
  if not y then
    error("bad time " .. tostring(text))
  end
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then -- days from civil (H. Hinnant)
    y = y - 1
  end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (mo + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end
_M.epoch = epoch

-- Snapshots -----------------------------------------------------------------------

-- A sliding window (sluice/quota.py SlidingWindow); hot-key options are GCRA's only.
local function window_of(raw, l)
  if not PERIODS[l.window] or l.limit < 1 or value(l.shards) or value(l.lease) then
    error("bad limit in " .. raw.scope .. "/" .. raw.route)
  end
  return {
    kind = "sliding_window",
    dimension = l.dimension,
    limit = l.limit,
    window = l.window,
    period = l.window,
    cost = value(l.cost),
    shadow = l.shadow == true,
    shards = 1,
    lease = 0,
    lease_ms = 1000,
    name = value(l.name),
    description = value(l.description),
  }
end

local QUOTA_PERIODS = { day = true, month = true }

-- A calendar quota (sluice/quota.py CalendarQuota): per day or month, in the
-- tenant's calendar; `period` is its key's part (day, month, month-billing).
local function quota_of(raw, l)
  local cycle = value(l.cycle) or "calendar"
  if not QUOTA_PERIODS[l.per] or l.limit < 1 or (cycle ~= "calendar" and cycle ~= "billing")
    or (cycle == "billing" and l.per ~= "month") then
    error("bad limit in " .. raw.scope .. "/" .. raw.route)
  end
  return {
    kind = "calendar_quota",
    dimension = l.dimension,
    limit = l.limit,
    per = l.per,
    cycle = cycle,
    period = cycle == "calendar" and l.per or l.per .. "-" .. cycle,
    cost = value(l.cost),
    shadow = l.shadow == true,
    shards = 1,
    lease = 0,
    lease_ms = 1000,
    name = value(l.name),
    description = value(l.description),
  }
end

local function policy_of(raw)
  local limits, calendared = {}, false
  for i, l in ipairs(raw.limits) do
    local kind = value(l.kind) or "gcra"
    if kind == "sliding_window" then
      limits[i] = window_of(raw, l)
    elseif kind == "calendar_quota" then
      limits[i] = quota_of(raw, l)
      calendared = true
    elseif kind ~= "gcra" then
      error("unknown limit kind " .. tostring(kind) .. " in " .. raw.scope .. "/" .. raw.route)
    else
      limits[i] = {
        kind = "gcra",
        dimension = l.dimension,
        rate = l.rate,
        period = l.period,
        burst = l.burst,
        cost = value(l.cost),
        shadow = l.shadow == true,
        shards = value(l.shards) or 1,
        lease = value(l.lease) or 0,
        lease_ms = value(l.lease_ms) or 1000,
        name = value(l.name),
        description = value(l.description),
      }
      if not PERIODS[l.period] or l.rate < 1 or l.burst < 1 then
        error("bad limit in " .. raw.scope .. "/" .. raw.route)
      end
    end
  end
  local concurrency = {}
  for i, c in ipairs(value(raw.concurrency) or {}) do
    concurrency[i] = {
      dimension = c.dimension,
      max_inflight = c.max_inflight,
      timeout = c.timeout,
      shadow = c.shadow == true,
      name = value(c.name),
      description = value(c.description),
    }
  end
  local expires = epoch(value(raw.expires_at))
  return {
    scope = raw.scope,
    route = raw.route,
    limits = limits,
    concurrency = concurrency,
    expires = expires or math.huge,
    override = expires ~= nil,
    ref = raw.scope .. "/" .. raw.route .. (expires and "~" or ""),
    plans = {},
    calendared = calendared, -- compiled per tenant calendar, per period
    plan_count = 0,
  }
end

local DEFAULT_CALENDAR = { zone = "UTC", billing_day = 1, rule = calendar.UTC_RULE, id = "UTC:1" }

-- Tenant -> its calendar (zone, billing day, the zone's POSIX rule), checked as
-- sluice/parsing.py and validation.py check them.
local function calendars_of(rules)
  local zones = value(rules.zones) or {}
  for zone, rule in pairs(zones) do
    calendar.parse_zone_rule(rule) -- raises on a bad one
  end
  local found = {}
  for slug, raw in pairs(value(rules.calendars) or {}) do
    local zone = value(raw.zone) or "UTC"
    local day = value(raw.billing_day) or 1
    local rule = zones[zone] or (zone == "UTC" and calendar.UTC_RULE)
    if not rule or type(day) ~= "number" or day < 1 or day > 31 or day % 1 ~= 0
      or rules.tenants[slug] == nil then
      error("bad calendar of tenant " .. tostring(slug))
    end
    found[slug] = { zone = zone, billing_day = day, rule = rule, id = zone .. ":" .. day }
  end
  return found
end

local Engine = {}
Engine.__index = Engine

--- An engine for one snapshot document (a decoded table); raises on a bad one.
function _M.engine(snapshot, options)
  if snapshot.format ~= 1 or type(snapshot.rules) ~= "table" then
    error("not a format 1 snapshot")
  end
  if options.verify ~= false and not canonical.verified(snapshot) then
    error("hash does not match the document (corrupt or altered)")
  end
  local rules = snapshot.rules
  local routes = {}
  for slug, raw in pairs(rules.routes) do
    routes[slug] = {
      slug = slug,
      methods = raw.methods,
      path = raw.path,
      cost = raw.cost,
      failure_mode = raw.failure_mode,
      max_cost = value(raw.max_cost),
    }
  end
  local index, default = {}, false
  for _, raw in ipairs(rules.policies) do
    local policy = policy_of(raw)
    local key = policy.scope .. "\0" .. policy.route
    local pair = index[key] or {}
    if policy.override then
      pair.override = policy
    else
      pair.permanent = policy
      default = default or key == "default\0*"
    end
    index[key] = pair
  end
  if not default then
    error("the default policy for all routes is missing")
  end
  return setmetatable({
    version = snapshot.version,
    hash = snapshot.hash,
    effective = epoch(snapshot.effective_at),
    tenants = rules.tenants,
    calendars = calendars_of(rules),
    documentation = value(rules.documentation) or "",
    routes = routes,
    tree = routing.tree(routes),
    index = index,
    unmatched = options.unmatched or "local",
  }, Engine)
end

--- The route of (method, path), or nil.
function Engine:match(method, path)
  return routing.match(self.tree, method, path)
end

--- The most specific live policy for (tenant, route) at `now` (epoch seconds).

-- The policy of a (scope, route) pair in force at ``now``: a live override, else
-- the permanent one; nil when the pair is absent or has neither.
local function in_force(pair, now)
  if not pair then
    return nil
  end
  if pair.override and now < pair.override.expires then
    return pair.override
  end
  return pair.permanent
end

function Engine:resolve(tenant, route, now)
  local tier = tenant and self.tenants[tenant]
  local scopes = {}
  if tenant then
    scopes[#scopes + 1] = "tenant:" .. tenant
  end
  if tier then
    scopes[#scopes + 1] = "tier:" .. tier
  end
  scopes[#scopes + 1] = "default"
  for _, scope in ipairs(scopes) do
    local found = route and in_force(self.index[scope .. "\0" .. route.slug], now)
    found = found or in_force(self.index[scope .. "\0*"], now)
    if found then
      return found
    end
  end
  error("no policy matched")
end

local PLANS_PER_POLICY = 1000 -- declared costs must not grow a worker's memory forever

--- The plan of `policy` for requests of `cost` (`share`: 1, or the local share); a
--- policy with calendar quotas per tenant `cal`endar too, in the period holding `now`
--- (epoch seconds), compiled again once that period ends (sluice/engine.py). Kept
--- for the snapshot's life, up to PLANS_PER_POLICY per policy (then afresh; a
--- plan's rehearsals live in the plan, so they go with it).
function Engine:plan(policy, cost, share, cal, now)
  local key = cost .. ":" .. share
  if policy.calendared then
    cal = cal or DEFAULT_CALENDAR
    key = key .. ":" .. cal.id
    now = now or ngx.now()
  else
    cal = nil
  end
  local plan = policy.plans[key]
  if plan == nil or (cal and plan.valid_until <= now) then
    if policy.plan_count >= PLANS_PER_POLICY then
      policy.plans, policy.plan_count = {}, 0
    end
    plan = plans.compile(policy, cost, share, cal, now)
    policy.plans[key] = plan
    policy.plan_count = policy.plan_count + 1
  end
  return plan
end

--- The calendar of `tenant` (UTC, billing day 1 when it has none).
function Engine:calendar(tenant)
  return tenant and self.calendars[tenant] or DEFAULT_CALENDAR
end

local function key_of(owner, p, who, tail)
  local key = owner .. p.middle .. keys.subject(p.dimension, who) .. p.suffix .. tail
  if p.shards > 1 then
    key = key .. ":s" .. floor(math.random() * p.shards)
  end
  return key
end

--- The cost a request of `route` (nil: none matched) declaring `declared` (nil:
--- nothing) is decided at, and why a declared cost was not taken: the twin of
--- sluice/rules.py request_cost. Above the route's max_cost: max_cost; on a route
--- without max_cost (or no route): the route's cost.
function _M.request_cost(route, declared)
  local cost = route and route.cost or 1
  if declared == nil or declared == cost then
    return cost, nil
  end
  if route == nil or route.max_cost == nil then
    return cost, "cost_not_taken"
  end
  if declared > route.max_cost then
    return route.max_cost, "cost_above_max"
  end
  return declared, nil
end

--- A request resolved and keyed. `who`: method, path, tenant, user, api_key, ip, cost.
--- `upcoming`: the engine of the next scheduled version, rehearsed beside this one.
function Engine:prepare(who, now, upcoming)
  local route = self:match(who.method, who.path)
  local policy = self:resolve(who.tenant, route, now)
  local route_cost = route and route.cost or 1
  local cost, refusal = _M.request_cost(route, who.cost)
  local plan = self:plan(policy, cost, 1, self:calendar(who.tenant), now)
  local owner = "rl:{" .. keys.owner(who, plan.counts_tenant)
  local bucket_keys = {}
  for i, p in ipairs(plan.limits) do
    bucket_keys[i] = key_of(owner, p, who, "")
  end
  local rehearsal
  if upcoming then -- at its own route cost, unless the request named another cost
    local later_route = route and upcoming.routes[route.slug] or nil
    local later = upcoming:resolve(who.tenant, later_route, now)
    local later_cost = later_route and later_route.cost or 1
    if cost ~= route_cost then
      later_cost = cost
    end
    local scheduled = upcoming:plan(later, later_cost, 1, upcoming:calendar(who.tenant), now)
    local found = rehearsals.of(plan, upcoming, scheduled)
    if found then
      local tail, rehearsal_keys = ":r" .. found.version, {}
      for i, p in ipairs(found.limits) do
        rehearsal_keys[i] = key_of(owner, p, who, tail)
      end
      rehearsal = { plan = found, keys = rehearsal_keys }
    end
  end
  local slot_keys = {}
  for i, s in ipairs(plan.slots) do
    slot_keys[i] = owner .. s.middle .. keys.subject(s.dimension, who) .. ":inflight"
  end
  return {
    plan = plan,
    keys = bucket_keys,
    rehearsal = rehearsal,
    slots = slot_keys,
    route = route and route.slug or nil,
    failure_mode = route and route.failure_mode or self.unmatched,
    cost = cost,
    unknown_tenant = who.tenant ~= nil and who.tenant ~= "" and self.tenants[who.tenant] == nil,
    -- the declared cost when the rules did not take it as is, and why
    declared_cost = refusal and who.cost or nil,
    cost_refusal = refusal,
  }
end

-- Bundles -------------------------------------------------------------------------

--- The engines of a bundle ({active, scheduled}), sorted by effective time; raises on a bad one.
function _M.bundle(document, options)
  if type(document) ~= "table" or type(document.active) ~= "table" then
    error("a bundle is an object with 'active' and 'scheduled'")
  end
  local active = _M.engine(document.active, options)
  local engines = {}
  for _, scheduled in ipairs(document.scheduled or {}) do
    local engine = _M.engine(scheduled, options)
    if engine.version <= active.version then
      error("scheduled version " .. engine.version .. " is not after the active one")
    end
    engines[#engines + 1] = engine
  end
  table.sort(engines, function(a, b)
    return a.effective < b.effective
  end)
  table.insert(engines, 1, active)
  return engines
end

--- The next scheduled engine after `now`, which gateways rehearse; nil when none.
function _M.upcoming(engines, now)
  for i = 2, #engines do
    if engines[i].effective > now then
      return engines[i]
    end
  end
  return nil
end

--- The engine in force at `now`: the latest scheduled one already effective, else the active.
function _M.in_force(engines, now)
  local found = engines[1]
  for i = 2, #engines do
    if engines[i].effective > now then
      break
    end
    found = engines[i]
  end
  return found
end

--- The built-in rules of a gateway that has never seen a snapshot: strict, never unlimited.
function _M.fallback(options)
  local built_in = setmetatable({ verify = false }, { __index = options })
  return {
    _M.engine({
      format = 1,
      version = 0,
      hash = "",
      effective_at = "1970-01-01T00:00:00Z",
      rules = {
        tiers = {},
        tenants = {},
        routes = {},
        policies = {
          {
            scope = "default",
            route = "*",
            expires_at = null,
            limits = {
              { dimension = "ip", rate = 10, period = 1, burst = 20, cost = null, shadow = false },
            },
          },
        },
      },
    }, built_in),
  }
end

return _M

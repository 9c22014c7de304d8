-- Sluice for nginx: a snapshot's rules as lookups, the same resolution as the Python
-- client (sluice/routing.py, resolver.py, plans.py, bucket.py, engine.py).
--
-- An engine is built once per snapshot: the route tree (literal segments before
-- parameters, HEAD answered as GET), the index of policies by (scope, route), and
-- compiled plans per (policy, cost, share). A request then costs a few table
-- look-ups and string concatenations. tests/conformance/ holds this to the Python
-- model: the corpus it generates is run against this module in the suite.

local cjson = require "cjson.safe"
local keys = require "sluice.nginx.keys"

local ceil, floor, max = math.ceil, math.floor, math.max
local null = cjson.null

local _M = {}

local PERIODS = { [1] = "s", [60] = "min", [3600] = "h", [86400] = "day" }
local MICROS = 1000000

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

-- Canonical JSON (sluice/canonical.py): sorted keys, no whitespace, integers only,
-- non-ASCII as it is. A decoded empty table is an array or an object by its member's
-- name: the snapshot format's arrays are these.
local ARRAYS = { policies = true, limits = true, methods = true, concurrency = true, scheduled = true }
local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }

local function escape(text)
  return '"' .. text:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or (c:byte() < 32 and string.format("\\u%04x", c:byte())) or c
  end) .. '"'
end

local function canonical(value, name, out)
  local kind = type(value)
  if value == null then
    out[#out + 1] = "null"
  elseif kind == "boolean" then
    out[#out + 1] = value and "true" or "false"
  elseif kind == "number" then
    if value ~= floor(value) or value ~= value then
      error("canonical JSON carries integers only")
    end
    out[#out + 1] = string.format("%d", value)
  elseif kind == "string" then
    out[#out + 1] = escape(value)
  elseif kind == "table" then
    if #value > 0 or (next(value) == nil and ARRAYS[name]) then
      out[#out + 1] = "["
      for i, item in ipairs(value) do
        out[#out + 1] = i > 1 and "," or ""
        canonical(item, name, out)
      end
      out[#out + 1] = "]"
    else
      local names = {}
      for key in pairs(value) do
        names[#names + 1] = key
      end
      table.sort(names)
      out[#out + 1] = "{"
      for i, key in ipairs(names) do
        out[#out + 1] = (i > 1 and "," or "") .. escape(key) .. ":"
        canonical(value[key], key, out)
      end
      out[#out + 1] = "}"
    end
  else
    error("not part of the snapshot format: " .. kind)
  end
end

--- Whether a decoded snapshot's `hash` is the SHA-256 of its canonical document.
local function verified(snapshot)
  local claimed = snapshot.hash
  snapshot.hash = nil
  local out = {}
  local ok, err = pcall(canonical, snapshot, nil, out)
  snapshot.hash = claimed
  if not ok then
    error(err)
  end
  return keys.sha256_hex(table.concat(out)) == claimed
end

-- Routes ------------------------------------------------------------------------

local function segments_of(pattern)
  if pattern:sub(1, 1) ~= "/" then
    error("route path must start with /: " .. pattern)
  end
  local segments = {}
  if pattern == "/" then
    return segments
  end
  for part in (pattern:sub(2) .. "/"):gmatch("([^/]*)/") do
    if part:match("^{[a-z_][a-z0-9_]*}$") then
      segments[#segments + 1] = false
    else
      segments[#segments + 1] = part
    end
  end
  return segments
end

local function new_node()
  return { literals = {}, param = nil, routes = {}, any = false }
end

local function route_tree(routes)
  local root = new_node()
  for slug, route in pairs(routes) do
    local node = root
    for _, segment in ipairs(segments_of(route.path)) do
      if segment == false then
        node.param = node.param or new_node()
        node = node.param
      else
        local child = node.literals[segment]
        if not child then
          child = new_node()
          node.literals[segment] = child
        end
        node = child
      end
    end
    for _, method in ipairs(route.methods) do
      node.routes[method] = route
      node.any = true
    end
  end
  return root
end

local function collect(node, segments, index, leaves)
  if index > #segments then
    if node.any then
      leaves[#leaves + 1] = node
    end
    return
  end
  local child = node.literals[segments[index]]
  if child then
    collect(child, segments, index + 1, leaves)
  end
  if node.param then
    collect(node.param, segments, index + 1, leaves)
  end
end

-- The path's segments as Python's path.strip("/").split("/") gives them.
local function path_segments(path)
  local stripped = path:match("^/*(.-)/*$")
  local segments = {}
  if stripped == "" then
    return segments
  end
  for part in (stripped .. "/"):gmatch("([^/]*)/") do
    segments[#segments + 1] = part
  end
  return segments
end

-- Plans -------------------------------------------------------------------------

local function limit_plan(policy, limit, cost, share)
  local shards = limit.shards
  local part = share * shards
  local tick = max(1, ceil(limit.period * MICROS * part / limit.rate))
  local burst = max(cost, floor(limit.burst / part))
  local capacity = burst * tick
  return {
    limit = limit,
    dimension = limit.dimension,
    name = limit.dimension .. "-" .. PERIODS[limit.period],
    middle = "}:route:" .. policy.route .. ":" .. limit.dimension .. ":",
    suffix = ":" .. limit.period .. "s",
    tick = tick,
    increment = cost * tick,
    capacity = capacity,
    quota = floor(capacity / tick) * shards,
    window = ceil(capacity / MICROS),
    shadow = limit.shadow,
    shards = shards,
    lease = limit.lease > 0 and max(1, floor(limit.lease / cost)) or 0, -- requests' worth
    lease_us = limit.lease > 0 and limit.lease_ms * 1000 or 0,
  }
end

local function compile(policy, cost, share)
  local limits, args, counts_tenant, sharded, leased = {}, {}, false, false, false
  for i, limit in ipairs(policy.limits) do
    local plan = limit_plan(policy, limit, limit.cost or cost, share)
    limits[i] = plan
    args[#args + 1] = string.format("%d", plan.increment)
    args[#args + 1] = string.format("%d", plan.capacity)
    args[#args + 1] = limit.shadow and "1" or "0"
    counts_tenant = counts_tenant or limit.dimension == "tenant"
    sharded = sharded or limit.shards > 1
    leased = leased or plan.lease > 0
  end
  local slots = {}
  for i, cap in ipairs(policy.concurrency) do
    slots[i] = {
      limit = cap,
      dimension = cap.dimension,
      name = cap.dimension .. "-concurrent",
      middle = "}:route:" .. policy.route .. ":" .. cap.dimension .. ":",
      args = {
        string.format("%d", cap.max_inflight),
        string.format("%d", cap.timeout * 1000),
        cap.shadow and "1" or "0",
      },
      shadow = cap.shadow,
    }
    counts_tenant = counts_tenant or cap.dimension == "tenant"
  end
  return {
    policy = policy,
    limits = limits,
    args = args,
    counts_tenant = counts_tenant,
    sharded = sharded,
    slots = slots,
    hot = #slots > 0 or leased, -- decided by hot.lua (sluice/hot.py)
    rehearsals = setmetatable({}, { __mode = "k" }), -- scheduled plan -> rehearsal
  }
end

-- Snapshots -----------------------------------------------------------------------

local function policy_of(raw)
  local limits = {}
  for i, l in ipairs(raw.limits) do
    limits[i] = {
      dimension = l.dimension,
      rate = l.rate,
      period = l.period,
      burst = l.burst,
      cost = value(l.cost),
      shadow = l.shadow == true,
      shards = value(l.shards) or 1,
      lease = value(l.lease) or 0,
      lease_ms = value(l.lease_ms) or 1000,
    }
    if not PERIODS[l.period] or l.rate < 1 or l.burst < 1 then
      error("bad limit in " .. raw.scope .. "/" .. raw.route)
    end
  end
  local concurrency = {}
  for i, c in ipairs(value(raw.concurrency) or {}) do
    concurrency[i] = {
      dimension = c.dimension,
      max_inflight = c.max_inflight,
      timeout = c.timeout,
      shadow = c.shadow == true,
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
  }
end

local Engine = {}
Engine.__index = Engine

--- An engine for one snapshot document (a decoded table); raises on a bad one.
function _M.engine(snapshot, options)
  if snapshot.format ~= 1 or type(snapshot.rules) ~= "table" then
    error("not a format 1 snapshot")
  end
  if options.verify ~= false and not verified(snapshot) then
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
    routes = routes,
    tree = route_tree(routes),
    index = index,
    unmatched = options.unmatched or "local",
  }, Engine)
end

--- The route of (method, path), or nil.
function Engine:match(method, path)
  local leaves = {}
  collect(self.tree, path_segments(path), 1, leaves)
  for _, leaf in ipairs(leaves) do
    local route = leaf.routes[method]
    if route == nil and method == "HEAD" then
      route = leaf.routes.GET
    end
    if route then
      return route
    end
  end
  return nil
end

--- The most specific live policy for (tenant, route) at `now` (epoch seconds).
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
    if route then
      local pair = self.index[scope .. "\0" .. route.slug]
      if pair then
        if pair.override and now < pair.override.expires then
          return pair.override
        end
        if pair.permanent then
          return pair.permanent
        end
      end
    end
    local pair = self.index[scope .. "\0*"]
    if pair then
      if pair.override and now < pair.override.expires then
        return pair.override
      end
      if pair.permanent then
        return pair.permanent
      end
    end
  end
  error("no policy matched")
end

--- The plan of `policy` for requests of `cost` (`share`: 1, or the local share).
function Engine:plan(policy, cost, share)
  local key = cost .. ":" .. share
  local plan = policy.plans[key]
  if plan == nil then
    plan = compile(policy, cost, share)
    policy.plans[key] = plan
  end
  return plan
end

-- Rehearsal (sluice/rehearsal.py) ------------------------------------------------------

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
    args[3 * index + 3] = "3" -- an enforced limit the rehearsed version shares
  end
  local reads = {}
  for i, p in ipairs(limits) do
    args[#args + 1] = string.format("%d", p.increment)
    args[#args + 1] = string.format("%d", p.capacity)
    args[#args + 1] = "2" -- a rehearsed limit: never rejects
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

local function rehearsal_of(active, upcoming, scheduled)
  local cache = active.rehearsals
  local found = cache[scheduled]
  if found == nil then
    found = rehearsal_plan(active, scheduled, upcoming.version)
    cache[scheduled] = found
  end
  return found
end

local function key_of(owner, p, who, tail)
  local key = owner .. p.middle .. keys.subject(p.dimension, who) .. p.suffix .. tail
  if p.shards > 1 then
    key = key .. ":s" .. floor(math.random() * p.shards)
  end
  return key
end

--- A request resolved and keyed. `who`: method, path, tenant, user, api_key, ip, cost.
--- `upcoming`: the engine of the next scheduled version, rehearsed beside this one.
function Engine:prepare(who, now, upcoming)
  local route = self:match(who.method, who.path)
  local policy = self:resolve(who.tenant, route, now)
  local route_cost = route and route.cost or 1
  local cost = who.cost or route_cost
  local plan = self:plan(policy, cost, 1)
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
    if who.cost and who.cost ~= route_cost then
      later_cost = who.cost
    end
    local found = rehearsal_of(plan, upcoming, upcoming:plan(later, later_cost, 1))
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

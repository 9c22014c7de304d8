-- Sluice for nginx: the client's own Lua scripts on Redis, by EVALSHA over pooled
-- connections (lua-resty-redis: Debian's lua-nginx-redis, or OpenResty's).
--
-- The scripts are read from the client package (sluice/lua/*.lua), the very files
-- the Python client runs: token_bucket.lua (refill, check and consume every limit
-- of a policy in one call, on Redis's clock), hot.lua (with concurrency slots),
-- release.lua and charge.lua. A NOSCRIPT reply (after SCRIPT FLUSH, a restart, a
-- failover) loads the script and runs it again.
--
-- With `pipelining` (the default), the scripts a worker runs share one connection
-- and go in batches (sluice.nginx.pipeline); without it, or while the worker's
-- flusher is not there (at exit), each call takes a pooled connection of its own.

local ok, redis = pcall(require, "resty.redis")
if not ok then
  redis = require "nginx.redis" -- Debian's lua-nginx-redis
end

local pipeline = require "sluice.nginx.pipeline"

local _M = {}

local function hex(raw)
  return (raw:gsub(".", function(c)
    return string.format("%02x", c:byte())
  end))
end

--- The package's scripts from `directory` (sluice/lua): {name = {source, sha}}.
function _M.scripts(directory)
  local found = {}
  for _, name in ipairs({ "token_bucket", "hot", "release", "charge" }) do
    local path = directory .. "/" .. name .. ".lua"
    local file = assert(io.open(path, "rb"), "sluice: cannot read " .. path)
    local source = file:read("*a")
    file:close()
    found[name] = { source = source, sha = hex(ngx.sha1_bin(source)) }
  end
  return found
end

local Store = {}
Store.__index = Store

--- A store on Redis `host`:`port` (database `db`), `timeout` ms per call; its
--- scripts auto-pipelined unless `pipelining` is false.
function _M.new(options)
  local self = setmetatable({
    host = options.host,
    port = options.port,
    db = options.db or 0,
    password = options.password,
    timeout = options.timeout or 5,
    pool_size = options.pool_size or 64,
  }, Store)
  if options.pipelining ~= false then
    self.lane = pipeline.new(self)
  end
  return self
end

--- In init_worker: the worker's flusher, when the store pipelines.
function Store:start()
  if self.lane then
    self.lane:start()
  end
end

--- A connected client from the pool, or nil and an error.
function Store:connect(timeout)
  local red = redis:new()
  timeout = timeout or self.timeout
  red:set_timeout(timeout) -- one value for connect, send, read (set_timeouts is newer than Debian's)
  local connected, err = red:connect(self.host, self.port, { pool_size = self.pool_size })
  if not connected then
    return nil, err
  end
  if red:get_reused_times() == 0 then -- a new connection: authenticate, select
    if self.password then
      local authed, failed = red:auth(self.password)
      if not authed then
        red:close()
        return nil, failed
      end
    end
    if self.db ~= 0 then
      local selected, failed = red:select(self.db)
      if not selected then
        red:close()
        return nil, failed
      end
    end
  end
  return red
end

--- Run `script` ({source, sha}) on `keys` and `args`: its reply, or nil and an error.
--- A connection is pooled again only after a whole reply (a late one is never read
--- as another call's).
function Store:run(script, keys, args, timeout)
  local lane = self.lane
  if lane and lane.running then
    return lane:run(script, keys, args, timeout or self.timeout)
  end
  local red, err = self:connect(timeout)
  if not red then
    return nil, err
  end
  local argv = { unpack(keys) }
  for i = 1, #args do
    argv[#keys + i] = args[i]
  end
  -- nil and an error: the connection failed (closed, never pooled); false and
  -- the message: an error reply, read whole
  local reply
  reply, err = red:evalsha(script.sha, #keys, unpack(argv))
  if reply == false and err and err:find("NOSCRIPT", 1, true) then
    local loaded
    loaded, err = red:script("load", script.source)
    if loaded then
      reply, err = red:evalsha(script.sha, #keys, unpack(argv))
    elseif loaded == nil then
      reply = nil
    end
  end
  if reply == nil then
    red:close()
    return nil, err
  end
  red:set_keepalive(60000, self.pool_size)
  if not reply then
    return nil, "script: " .. tostring(err)
  end
  return reply
end

--- Redis's TIME: seconds and microseconds, or nil and an error.
function Store:time(timeout)
  local red, err = self:connect(timeout)
  if not red then
    return nil, err
  end
  local reply
  reply, err = red:time()
  if not reply then
    red:close()
    return nil, err
  end
  red:set_keepalive(60000, self.pool_size)
  return tonumber(reply[1]), tonumber(reply[2])
end

--- Commands in one round trip (the decision events' XADDs): true, or nil and an error.
function Store:pipeline(commands, timeout)
  local red, err = self:connect(timeout)
  if not red then
    return nil, err
  end
  red:init_pipeline(#commands)
  for _, command in ipairs(commands) do
    red[command[1]](red, unpack(command, 2))
  end
  local replies
  replies, err = red:commit_pipeline()
  if not replies then
    red:close()
    return nil, err
  end
  red:set_keepalive(60000, self.pool_size)
  for _, reply in ipairs(replies) do
    if type(reply) == "table" and reply[1] == false then
      return nil, reply[2]
    end
  end
  return true
end

return _M

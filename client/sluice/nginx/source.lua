-- Sluice for nginx: the snapshot polled from the control plane, as sluice/source.py does.
--
-- `GET <control plane>/api/v1/snapshot` from a timer (never on a request's path),
-- with the gateway token, If-None-Match (304: nothing to do) and the fleet report
-- (Sluice-Gateway-Id, Sluice-Applied-Version; a refused bundle's version and reason).
-- A new bundle is verified (its Ed25519 signature by a trusted key: sluice.nginx.signing,
-- then each snapshot's hash over its canonical document) and compiled before it
-- replaces the one in force: a bad, unsigned or wrongly signed one is kept out with
-- one log line and reported. The last good bundle is written to the cache file
-- atomically (the Python client's format: a line of JSON with the etag and the
-- signature, then the body as served) and read back, its signature checked again,
-- when a worker starts, so a gateway restarted while the control plane is down
-- enforces what it enforced before; with nothing at all, the strict built-in rules apply.

local cjson = require "cjson.safe"
local signing = require "sluice.nginx.signing"

local _M = {}

local Source = {}
Source.__index = Source

--- A source; `install(document, etag)` compiles and applies a bundle, raising if it
--- is bad; `keys` the key ring bundles must be signed with (signing.load).
function _M.new(options, install, keys)
  local scheme, host, port, path =
    options.control_plane:match("^(https?)://([^:/]+):?(%d*)(.*)$")
  if not scheme then
    error("sluice: control_plane must be http(s)://host[:port][/prefix]")
  end
  return setmetatable({
    scheme = scheme,
    host = host,
    port = tonumber(port) or (scheme == "https" and 443 or 80),
    path = path:gsub("/$", "") .. "/api/v1/snapshot",
    token = options.token or "",
    gateway_id = options.gateway_id,
    cache = options.cache and (options.cache:sub(1, 1) == "/" and options.cache
      or ngx.config.prefix() .. options.cache), -- relative: to nginx's -p prefix
    timeout = (options.poll_timeout or 2) * 1000,
    ssl_verify = options.ssl_verify ~= false,
    install = install,
    keys = keys,
    refused = nil, -- the ETag of the last bundle refused: logged once
    etag = nil,
    applied = nil, -- the version in force, reported on every poll
    rejected = nil, -- {version, reason}, reported on the next poll
    failures = 0,
  }, Source)
end

function Source:headers()
  local lines = {
    "GET " .. self.path .. " HTTP/1.1",
    "Host: " .. self.host .. ":" .. self.port,
    "Authorization: Bearer " .. self.token,
    "Accept: application/json",
    "Connection: close",
    "Sluice-Gateway-Id: " .. self.gateway_id,
  }
  if self.etag then
    lines[#lines + 1] = "If-None-Match: " .. self.etag
  end
  if self.applied and self.applied > 0 then
    lines[#lines + 1] = "Sluice-Applied-Version: " .. self.applied
  end
  local rehearsed = self.rehearsing and self.rehearsing()
  if rehearsed then
    lines[#lines + 1] = "Sluice-Rehearsed-Version: " .. rehearsed
  end
  if self.rejected then
    lines[#lines + 1] = "Sluice-Rejected-Version: " .. self.rejected[1]
    lines[#lines + 1] = "Sluice-Rejected-Reason: "
      .. self.rejected[2]:gsub("[^\32-\126]+", " "):sub(1, 200)
    self.rejected = nil
  end
  return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

local function read_body(sock, headers)
  local length = tonumber(headers["content-length"])
  if length then
    return sock:receive(length)
  end
  if (headers["transfer-encoding"] or ""):lower():find("chunked", 1, true) then
    local parts = {}
    while true do
      local line, err = sock:receive("*l")
      if not line then
        return nil, err
      end
      local size = tonumber(line:match("^%x+"), 16)
      if not size then
        return nil, "bad chunk"
      end
      if size == 0 then
        return table.concat(parts)
      end
      local chunk
      chunk, err = sock:receive(size)
      if not chunk then
        return nil, err
      end
      parts[#parts + 1] = chunk
      sock:receive("*l")
    end
  end
  return sock:receive("*a")
end

--- One GET: status, headers (lower-case names), body; or nil and an error.
function Source:get()
  local sock = ngx.socket.tcp()
  sock:settimeouts(self.timeout, self.timeout, self.timeout)
  local ok, err = sock:connect(self.host, self.port)
  if not ok then
    return nil, err
  end
  if self.scheme == "https" then
    ok, err = sock:sslhandshake(nil, self.host, self.ssl_verify)
    if not ok then
      sock:close()
      return nil, err
    end
  end
  ok, err = sock:send(self:headers())
  if not ok then
    sock:close()
    return nil, err
  end
  local line
  line, err = sock:receive("*l")
  local status = line and tonumber(line:match("^HTTP/%d%.%d (%d%d%d)"))
  if not status then
    sock:close()
    return nil, err or "bad status line"
  end
  local headers = {}
  while true do
    line, err = sock:receive("*l")
    if not line then
      sock:close()
      return nil, err
    end
    if line == "" then
      break
    end
    local name, value = line:match("^([^:]+):%s*(.-)%s*$")
    if name then
      headers[name:lower()] = value
    end
  end
  local body = ""
  if status == 200 then
    body, err = read_body(sock, headers)
  end
  sock:close()
  if not body then
    return nil, err
  end
  return status, headers, body
end

function Source:failed(reason)
  if self.failures == 0 then -- one line per outage, not one per poll
    ngx.log(ngx.WARN, "sluice: snapshot.unreachable: ", self.path, ": ", reason)
  end
  self.failures = self.failures + 1
end

--- Ask the control plane once; apply, keep or refuse what comes back.
function Source:poll()
  local status, headers, body = self:get()
  if not status then
    return self:failed(headers)
  end
  if status == 304 then
    self.failures = 0
    return
  end
  if status ~= 200 then
    return self:failed("HTTP " .. status)
  end
  self.failures = 0
  local signature = headers["sluice-signature"]
  local document = cjson.decode(body)
  local ok, err = signing.verify(self.keys, body, signature)
  if ok then
    ok, err = pcall(self.install, document)
  end
  if not ok then
    local version = type(document) == "table" and type(document.active) == "table"
      and tonumber(document.active.version)
    if not headers["etag"] or headers["etag"] ~= self.refused then -- one line per bundle
      ngx.log(ngx.WARN, "sluice: snapshot.rejected: version ", tostring(version), ": ", err)
    end
    self.refused = headers["etag"]
    if version then
      self.rejected = { version, tostring(err) }
    end
    return
  end
  self.etag = headers["etag"]
  self:save(body, signature)
end

--- Write the last good bundle atomically (a temporary file renamed over the cache).
function Source:save(body, signature)
  if not self.cache then
    return
  end
  local temporary = self.cache .. ".tmp." .. ngx.worker.pid()
  local file, err = io.open(temporary, "wb")
  if not file then
    return ngx.log(ngx.WARN, "sluice: snapshot.cache_write_failed: ", err)
  end
  file:write(cjson.encode({ etag = self.etag or cjson.null, signature = signature }), "\n", body)
  file:close()
  local moved
  moved, err = os.rename(temporary, self.cache)
  if not moved then
    os.remove(temporary)
    ngx.log(ngx.WARN, "sluice: snapshot.cache_write_failed: ", err)
  end
end

--- Install the cached bundle, if there is a good one; true when installed.
function Source:load()
  if not self.cache then
    return false
  end
  local file = io.open(self.cache, "rb")
  if not file then
    return false
  end
  local raw = file:read("*a")
  file:close()
  local newline = raw:find("\n", 1, true)
  local data = newline and cjson.decode(raw:sub(1, newline - 1))
  if type(data) ~= "table" or type(data.signature) ~= "string" then
    ngx.log(ngx.WARN, "sluice: snapshot.cache_ignored: ", self.cache,
      ": not a signed Sluice bundle file")
    return false
  end
  local body = raw:sub(newline + 1)
  local ok, err = signing.verify(self.keys, body, data.signature)
  if ok then
    ok, err = pcall(self.install, cjson.decode(body))
  end
  if not ok then
    ngx.log(ngx.WARN, "sluice: snapshot.cache_ignored: ", self.cache, ": ", err)
    return false
  end
  self.etag = data.etag ~= cjson.null and data.etag or nil
  return true
end

return _M

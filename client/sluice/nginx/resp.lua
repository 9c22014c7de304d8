-- Sluice for nginx: Redis's protocol (RESP2) for the worker's pipelined connection
-- (sluice.nginx.pipeline): commands appended to one table of fragments for a single
-- send, and replies read from whatever the socket has, many per read.
--
-- Replies come back as lua-resty-redis gives them (the module read them with it
-- before): integers as numbers, bulk and status strings as strings, a nil bulk as
-- ngx.null, arrays as tables, an error reply as false and its message ({false,
-- message} inside an array).

local byte, find, sub = string.byte, string.find, string.sub
local tostring, tonumber, type = tostring, tonumber, type
local null = ngx.null

local _M = {}

local function append(fragments, n, argv)
  for i = 1, #argv do
    local arg = argv[i]
    if type(arg) ~= "string" then
      arg = tostring(arg)
    end
    fragments[n + 1], fragments[n + 2], fragments[n + 3] = "$", #arg, "\r\n"
    fragments[n + 4], fragments[n + 5] = arg, "\r\n"
    n = n + 5
  end
  return n
end

--- Append the command `argv` (strings; other values by tostring) to `fragments`.
function _M.command(fragments, argv)
  local n = #fragments
  fragments[n + 1], fragments[n + 2], fragments[n + 3] = "*", #argv, "\r\n"
  append(fragments, n + 3, argv)
end

--- Append EVALSHA of `sha` on `keys`, then `args`.
function _M.evalsha(fragments, sha, keys, args)
  local n, nkeys = #fragments, tostring(#keys)
  fragments[n + 1], fragments[n + 2] = "*", #keys + #args + 3
  fragments[n + 3], fragments[n + 4] = "\r\n$7\r\nEVALSHA\r\n$40\r\n", sha
  fragments[n + 5], fragments[n + 6], fragments[n + 7] = "\r\n$", #nkeys, "\r\n"
  fragments[n + 8], fragments[n + 9] = nkeys, "\r\n"
  n = append(fragments, n + 9, keys)
  append(fragments, n, args)
end

local parse

--- One reply in `buffer` from `at`: value, where the next starts (and an error
--- reply's message with value false); nothing when the buffer ends before it does.
parse = function(buffer, at)
  local eol = find(buffer, "\r\n", at, true)
  if not eol then
    return
  end
  local prefix, line = byte(buffer, at), sub(buffer, at + 1, eol - 1)
  local after = eol + 2
  if prefix == 58 then -- ":" integer
    return tonumber(line), after
  elseif prefix == 42 then -- "*" array
    local count = tonumber(line)
    if count < 0 then
      return null, after
    end
    local values = {}
    for i = 1, count do
      local value, next_at, message = parse(buffer, after)
      if not next_at then
        return
      end
      values[i], after = value == false and { false, message } or value, next_at
    end
    return values, after
  elseif prefix == 36 then -- "$" bulk string
    local size = tonumber(line)
    if size < 0 then
      return null, after
    end
    if #buffer < after + size + 1 then
      return
    end
    return sub(buffer, after, after + size - 1), after + size + 2
  elseif prefix == 43 then -- "+" status
    return line, after
  elseif prefix == 45 then -- "-" error
    return false, after, line
  end
  error("sluice: not a Redis reply: " .. tostring(sub(buffer, at, at + 20)))
end

local Reader = {}
Reader.__index = Reader

--- Replies read from `sock` (a connected cosocket).
function _M.reader(sock)
  return setmetatable({ sock = sock, buffer = "", at = 1 }, Reader)
end

--- The next reply (false and the message for an error reply), or nil and the
--- socket's error.
function Reader:read()
  while true do
    local value, next_at, message = parse(self.buffer, self.at)
    if next_at then
      self.at = next_at
      return value, message
    end
    local more, err = self.sock:receiveany(65536)
    if not more then
      return nil, err
    end
    self.buffer, self.at = sub(self.buffer, self.at) .. more, 1
  end
end

return _M

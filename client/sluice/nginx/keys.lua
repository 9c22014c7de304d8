-- Sluice for nginx: the Redis key scheme of sluice/keys.py, and the request's identity.
--
-- A bucket key names whose bucket it is, never which scope's policy set its numbers:
--   rl:{<owner>}:route:<route>:<dimension>:<value>:<period>s   (":s<n>" for a shard)
--   rl:{<owner>}:route:<route>:<dimension>:<value>:inflight    (a concurrency set)
-- Values are verbatim when short and plain ([A-Za-z0-9._@:-], at most 64 bytes),
-- else "#" and 32 hex digits of their SHA-256; an API key is always hashed; a
-- missing value is "~". Python reads header values as Latin-1 text and hashes their
-- UTF-8 bytes, so header bytes are turned into that UTF-8 first (utf8_of_latin1).

local ffi = require "ffi"

local byte, char, concat, format = string.byte, string.char, table.concat, string.format

ffi.cdef [[
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
]]

local function crypto()
  local ok = pcall(function() return ffi.C.SHA256 end)
  if ok then
    return ffi.C -- nginx links OpenSSL: the symbol is in the process already
  end
  for _, name in ipairs({ "crypto", "libcrypto.so.3", "libcrypto.so.1.1" }) do
    local loaded, lib = pcall(ffi.load, name)
    if loaded then
      return lib
    end
  end
  error("sluice: no SHA256 in libcrypto")
end

local C = crypto()
local digest_buffer = ffi.new("unsigned char[32]")

local _M = { MISSING = "~", PREFIX = "rl" }

local MISSING = _M.MISSING

--- The SHA-256 of `value` in hex, its first `bytes` bytes (32: all of it).
function _M.sha256_hex(value, bytes)
  C.SHA256(value, #value, digest_buffer)
  local hex = {}
  for i = 0, (bytes or 32) - 1 do
    hex[#hex + 1] = format("%02x", digest_buffer[i])
  end
  return concat(hex)
end

local sha256_hex = _M.sha256_hex

--- "#" and the first 32 hex digits of the SHA-256 of `value`.
function _M.digest(value)
  return "#" .. sha256_hex(value, 16)
end

local digest = _M.digest

--- `value` as it appears in a key: verbatim, "~" when missing, else hashed.
function _M.encode(value)
  if value == nil or value == "" then
    return MISSING
  end
  if #value <= 64 and not value:find("[^%w%._@:%-]") then
    return value
  end
  return digest(value)
end

local encode = _M.encode

--- The encoded subject of a limit of `dimension` for a request's identity.
function _M.subject(dimension, who)
  if dimension == "tenant" then
    return encode(who.tenant)
  elseif dimension == "user" then
    return encode(who.user)
  elseif dimension == "api_key" then
    return who.api_key and digest(who.api_key) or MISSING
  end
  return encode(who.ip)
end

--- The hash-tag owner of a decision.
function _M.owner(who, counts_tenant)
  if who.tenant then
    return "tenant:" .. encode(who.tenant)
  elseif counts_tenant then
    return "tenant:" .. MISSING
  end
  return "ip:" .. encode(who.ip)
end

--- Latin-1 bytes as UTF-8 (what Python makes of a header value).
function _M.utf8_of_latin1(value)
  if not value:find("[\128-\255]") then
    return value
  end
  local out = {}
  for i = 1, #value do
    local b = byte(value, i)
    if b < 128 then
      out[#out + 1] = char(b)
    else
      out[#out + 1] = char(0xC0 + math.floor(b / 64), 0x80 + b % 64)
    end
  end
  return concat(out)
end

return _M

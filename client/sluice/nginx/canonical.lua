-- Sluice for nginx: a snapshot's hash checked over its canonical JSON, the one
-- serialization of sluice/canonical.py: sorted keys, no whitespace, integers only,
-- non-ASCII as it is. A gateway never switches to a document whose hash does not
-- match: corrupt or altered on its way (or on disk).

local cjson = require "cjson.safe"
local keys = require "sluice.nginx.keys"

local floor = math.floor
local null = cjson.null

local _M = {}

-- A decoded empty table is an array or an object by its member's name: the
-- snapshot format's arrays are these.
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
function _M.verified(snapshot)
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

return _M

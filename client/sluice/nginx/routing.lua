-- Sluice for nginx: route path patterns (/v1/orders/{id}) and the tree that matches a
-- request's method and path to a route, as sluice/routing.py: literal segments before
-- parameters, HEAD answered as GET. Its cost is the path's depth, not the routes'.

local _M = {}

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

--- The tree of `routes` (slug -> {methods, path, ...}).
function _M.tree(routes)
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

--- The route of (method, path) in `tree`, or nil.
function _M.match(tree, method, path)
  local leaves = {}
  collect(tree, path_segments(path), 1, leaves)
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

return _M

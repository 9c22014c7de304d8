-- Sluice for nginx: a worker's script calls auto-pipelined on one Redis connection.
--
-- A request does not take a pooled connection of its own: it queues its EVALSHA and
-- waits on a semaphore. One background light thread per worker (a timer that lives
-- as long as the worker: a cosocket cannot leave the request that made it, a
-- timer's can stay) owns the connection, writes every queued call in one send and
-- reads the replies in order, waking each caller. What a decision costs the worker
-- is then one queue entry and one wake-up instead of a pool get and put, a send, a
-- receive and their two suspensions (docs/benchmarks.md, issue 24).
--
-- Nothing waits longer than its own timeout: a caller whose reply is late (a stalled
-- Redis, a broken connection, a flusher that died) gets "timeout" and the route's
-- failure mode decides, as with a pooled connection. A call that was sent may still
-- run on Redis: the same bounded overshoot as a call that timed out on its own
-- connection (docs/gateways/nginx.md). A call whose caller gave up before it was
-- sent is never sent.

local resp = require "sluice.nginx.resp"
local semaphore = require "ngx.semaphore"

local max = math.max

--- Semaphores kept for the next calls (a new one costs an allocation and a finalizer).
local SPARE = 256

local _M = {}

local Lane = {}
Lane.__index = Lane

--- A lane on `store` (sluice.nginx.store): its address, credentials and scripts.
function _M.new(store)
  return setmetatable({
    store = store,
    queue = {},
    spare = {}, -- semaphores of answered calls, for the next ones
    wake = nil, -- the flusher's, made in the worker (start)
    idle = false, -- the flusher waits on `wake` for a first call
    running = false, -- a flusher is there to send what is queued
    sock = nil, -- the flusher's connection
    reader = nil, -- its replies
  }, Lane)
end

--- Run `script` on `keys` and `args` in the next batch: its reply, or nil and an
--- error ("timeout" past `timeout` ms).
function Lane:run(script, keys, args, timeout)
  local spare = self.spare
  local done = spare[#spare] or semaphore.new(0)
  spare[#spare] = nil
  local call = { script = script, keys = keys, args = args, done = done,
    deadline = ngx.now() + timeout / 1000 }
  local queue = self.queue
  queue[#queue + 1] = call
  if self.idle then
    self.idle = false
    self.wake:post(1)
  end
  local woken, err = done:wait(timeout / 1000)
  if not woken then
    call.abandoned = true -- not sent yet: never will be; sent: its reply is dropped
    return nil, err -- and `done` is not reused: the flusher may still post it
  end
  if #spare < SPARE then -- back to 0, as new
    spare[#spare + 1] = done
  end
  return call.reply, call.err
end

local function answer(call, reply, err)
  call.reply, call.err, call.answered = reply, err, true
  call.done:post(1)
end

--- The flusher's connection, made when there is none (AUTH and SELECT as the
--- store's), or nil and an error.
function Lane:connection(timeout)
  if self.sock then
    return self.sock
  end
  local store, sock = self.store, ngx.socket.tcp()
  sock:settimeout(timeout)
  local ok, err = sock:connect(store.host, store.port)
  if not ok then
    return nil, err
  end
  self.sock, self.reader = sock, resp.reader(sock)
  local setup = {}
  if store.password then
    setup[#setup + 1] = { "AUTH", store.password }
  end
  if store.db ~= 0 then
    setup[#setup + 1] = { "SELECT", store.db }
  end
  for _, reply in ipairs(self:exchange(setup, resp.command)) do
    if not reply[1] then
      self:drop()
      return nil, reply[2]
    end
  end
  return self.sock
end

function Lane:drop()
  if self.sock then
    self.sock:close()
    self.sock, self.reader = nil, nil
  end
end

--- Write `items` in one send (`encode(fragments, item)` appends each), read a reply
--- per item: {reply} or {false, message}; on a broken connection (dropped: a late
--- reply must never be read as the next batch's), {nil, error} from there on.
function Lane:exchange(items, encode)
  local replies, fragments = {}, {}
  if #items == 0 then
    return replies
  end
  for _, item in ipairs(items) do
    encode(fragments, item)
  end
  local sock, reader = self.sock, self.reader
  local sent, err = sock:send(fragments)
  for i = 1, #items do
    local reply, message = nil, err
    if sent then
      reply, message = reader:read()
    end
    if reply == nil then
      self:drop()
      sent, err = nil, message
    end
    replies[i] = { reply, message }
  end
  return replies
end

local function encode_call(fragments, call)
  resp.evalsha(fragments, call.script.sha, call.keys, call.args)
end

local function encode_load(fragments, script)
  resp.command(fragments, { "SCRIPT", "LOAD", script.source })
end

--- One batch: send what is still wanted, answer every caller (a script error as
--- the store reports it), load and run again what met NOSCRIPT, once.
function Lane:flush(batch)
  local now, calls, timeout = ngx.now(), {}, 1
  for _, call in ipairs(batch) do
    if not call.abandoned then
      calls[#calls + 1] = call
      timeout = max(timeout, (call.deadline - now) * 1000)
    end
  end
  for attempt = 1, 2 do
    if #calls == 0 then
      return
    end
    local sock, err = self:connection(timeout)
    if not sock then
      for _, call in ipairs(calls) do
        answer(call, nil, err)
      end
      return
    end
    sock:settimeout(timeout)
    local missing, scripts = {}, {}
    for i, reply in ipairs(self:exchange(calls, encode_call)) do
      local call, value, message = calls[i], reply[1], reply[2]
      if value ~= false then
        answer(call, value, message)
      elseif attempt == 1 and message:find("NOSCRIPT", 1, true) then
        missing[#missing + 1] = call
        if not scripts[call.script] then
          scripts[call.script] = true
          scripts[#scripts + 1] = call.script
        end
      else
        answer(call, nil, "script: " .. tostring(message))
      end
    end
    calls = missing
    for _, loaded in ipairs(self:exchange(scripts, encode_load)) do
      if not loaded[1] then
        for _, call in ipairs(calls) do
          answer(call, nil, loaded[2])
        end
        return
      end
    end
  end
end

--- The flusher: waits for calls, sends each batch; ends when the worker exits and
--- nothing is queued. A batch that raises is answered with the error, never left.
function Lane:loop()
  while not (ngx.worker.exiting() and #self.queue == 0) do
    if #self.queue == 0 then
      self.idle = true
      self.wake:wait(0.5) -- a wake-up, or a look at ngx.worker.exiting()
      self.idle = false
    end
    local batch = self.queue
    if #batch > 0 then
      self.queue = {}
      local ok, err = pcall(self.flush, self, batch)
      if not ok then
        ngx.log(ngx.ERR, "sluice: limiter.pipeline_crashed: ", err)
        self:drop()
        for _, call in ipairs(batch) do
          if not call.answered then
            answer(call, nil, "pipeline: " .. tostring(err))
          end
        end
      end
    end
  end
end

local function run_flusher(premature, lane)
  if premature then
    lane.running = false
    return
  end
  local ok, err = pcall(lane.loop, lane)
  lane:drop()
  lane.running = false
  if not ok then -- a bug: log it and start again; callers meanwhile time out
    ngx.log(ngx.ERR, "sluice: limiter.pipeline_crashed: ", err)
    lane:start()
  end
end

--- Start the worker's flusher (in init_worker, or again after a crash).
function Lane:start()
  self.wake = self.wake or semaphore.new(0)
  local ok, err = ngx.timer.at(0, run_flusher, self)
  if not ok then
    ngx.log(ngx.ERR, "sluice: limiter.pipeline_not_started: ", err)
    return
  end
  self.running = true
end

return _M

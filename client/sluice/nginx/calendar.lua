-- Sluice for nginx: calendar periods of a tenant, as sluice/calendar.py (line for
-- line): the POSIX TZ rule a snapshot carries per zone (rules.zones), evaluated in
-- integers, and the bounds of a local day, a calendar month or a billing month.
-- A local time skipped or repeated at a DST change: the earlier of its UTC instants.

local floor, min = math.floor, math.min

local _M = {}

local DAY = 86400
local MONTH_DAYS = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
_M.UTC_RULE = "UTC0"

-- Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
local function days_from_civil(year, month, day)
  if month <= 2 then
    year = year - 1
  end
  local era = floor(year / 400)
  local yoe = year - era * 400
  local mp = month <= 2 and month + 9 or month - 3
  local doy = floor((153 * mp + 2) / 5) + day - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- (year, month, day) of `days` since 1970-01-01.
local function civil_from_days(days)
  days = days + 719468
  local era = floor(days / 146097)
  local doe = days - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local day = doy - floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (month <= 2 and 1 or 0), month, day
end

local function leap(year)
  return year % 4 == 0 and (year % 100 ~= 0 or year % 400 == 0)
end

local function month_days(year, month)
  if month == 2 and leap(year) then
    return 29
  end
  return MONTH_DAYS[month]
end

-- Days since the epoch of the day a transition rule names in `year`.
local function change_day(year, rule)
  local form, a, b, c = rule[1], rule[2], rule[3], rule[4]
  if form == "J" then -- 1..365, February 29 never counted
    return days_from_civil(year, 1, 1) + a - 1 + ((leap(year) and a >= 60) and 1 or 0)
  end
  if form == "N" then -- 0..365, February 29 counted
    return days_from_civil(year, 1, 1) + a
  end
  local first = days_from_civil(year, a, 1) -- Mm.w.d: weekday d of week w (5: last)
  local day = first + (c - (first + 4) % 7) % 7 + 7 * (b - 1) -- 1970-01-01: a Thursday
  while day >= first + month_days(year, a) do
    day = day - 7
  end
  return day
end

--- The zone's offset (seconds east of UTC) at `instant` (epoch seconds).
function _M.utc_offset(rule, instant)
  if rule.dst == nil then
    return rule.std
  end
  local year = civil_from_days(floor((instant + rule.std) / DAY))
  local start = change_day(year, rule.start[1]) * DAY + rule.start[2] - rule.std
  local finish = change_day(year, rule.finish[1]) * DAY + rule.finish[2] - rule.dst
  if start < finish then -- northern hemisphere: DST inside the year
    return (start <= instant and instant < finish) and rule.dst or rule.std
  end
  return (instant < finish or instant >= start) and rule.dst or rule.std -- southern
end

--- The UTC instant of `local_s` (local epoch seconds): the earlier reading when it
--- is skipped or repeated.
function _M.local_to_utc(rule, local_s)
  local offsets = rule.dst == nil and { rule.std } or { rule.std, rule.dst }
  local earliest_valid, earliest
  for _, offset in ipairs(offsets) do
    local utc = local_s - offset
    earliest = earliest and min(earliest, utc) or utc
    if _M.utc_offset(rule, utc) == offset then
      earliest_valid = earliest_valid and min(earliest_valid, utc) or utc
    end
  end
  return earliest_valid or earliest
end

-- Local midnight of a date (day 0 or past the month's end roll over).
local function boundary(rule, year, month, day)
  return _M.local_to_utc(rule, (days_from_civil(year, month, 1) + day - 1) * DAY)
end

-- Local midnight of the `anchor` day of a month (its last day if it has fewer).
local function cycle_start(rule, year, month, anchor)
  year, month = year + floor((month - 1) / 12), (month - 1) % 12 + 1
  return boundary(rule, year, month, min(anchor, month_days(year, month)))
end

-- POSIX TZ rules: std offset [dst [offset] ,start[/time],end[/time]] ---------------

local function reader(text)
  return { text = text, at = 1 }
end

local function peek(r)
  return r.text:sub(r.at, r.at)
end

local function take(r, char)
  if peek(r) == char then
    r.at = r.at + 1
    return true
  end
  return false
end

local function name(r)
  local found
  if take(r, "<") then
    local finish = r.text:find(">", r.at, true)
    if not finish then
      error("unterminated <name>")
    end
    found, r.at = r.text:sub(r.at, finish - 1), finish + 1
  else
    found = r.text:match("^%a*", r.at)
    r.at = r.at + #found
  end
  if #found < 3 then
    error("zone abbreviation too short at " .. r.at)
  end
end

local function number(r)
  local digits = r.text:match("^%d+", r.at)
  if not digits then
    error("number expected at " .. r.at)
  end
  r.at = r.at + #digits
  return tonumber(digits)
end

-- [+-]hh[:mm[:ss]] in seconds, hours at most `most`.
local function time_of(r, most)
  local sign = take(r, "-") and -1 or 1
  if sign == 1 then
    take(r, "+")
  end
  local seconds = number(r) * 3600
  if seconds > most * 3600 then
    error("hours out of range at " .. r.at)
  end
  for _, scale in ipairs({ 60, 1 }) do
    if not take(r, ":") then
      break
    end
    local part = number(r)
    if part > 59 then
      error("minutes or seconds out of range at " .. r.at)
    end
    seconds = seconds + part * scale
  end
  return sign * seconds
end

local function change(r)
  local day
  if take(r, "M") then
    local month = number(r)
    local week = take(r, ".") and number(r) or 0
    local weekday = take(r, ".") and number(r) or -1
    if not (month >= 1 and month <= 12 and week >= 1 and week <= 5 and weekday >= 0 and weekday <= 6) then
      error("bad Mm.w.d at " .. r.at)
    end
    day = { "M", month, week, weekday }
  elseif take(r, "J") then
    local julian = number(r)
    if julian < 1 or julian > 365 then
      error("bad Jn at " .. r.at)
    end
    day = { "J", julian, 0, 0 }
  else
    local n = number(r)
    if n > 365 then
      error("bad day number at " .. r.at)
    end
    day = { "N", n, 0, 0 }
  end
  return { day, take(r, "/") and time_of(r, 167) or 7200 }
end

local parsed = {}

--- The rule of a POSIX TZ string (std, dst, start, finish; offsets east of UTC),
--- cached; raises on a string that is not one.
function _M.parse_zone_rule(text)
  local rule = parsed[text]
  if rule then
    return rule
  end
  local r = reader(text)
  name(r)
  local std = -time_of(r, 24)
  if r.at > #text then
    rule = { std = std }
  else
    name(r)
    local dst = std + 3600
    if peek(r) ~= "," and peek(r) ~= "" then
      dst = -time_of(r, 24)
    end
    if not take(r, ",") then
      error("a zone with daylight time needs its ,start,end rules")
    end
    local start = change(r)
    if not take(r, ",") then
      error("',' expected at " .. r.at)
    end
    local finish = change(r)
    if r.at <= #text then
      error("unexpected " .. text:sub(r.at))
    end
    rule = { std = std, dst = dst, start = start, finish = finish }
  end
  parsed[text] = rule
  return rule
end

--- start, end, next end (epoch seconds) of the period holding `instant`: a local day
--- (per "day"), a calendar month, or a billing month from `billing_day`.
function _M.period_bounds(instant, per, cycle, zone_rule, billing_day)
  local rule = _M.parse_zone_rule(zone_rule)
  local year, month, day = civil_from_days(floor((instant + _M.utc_offset(rule, instant)) / DAY))
  if per == "day" then
    if instant < boundary(rule, year, month, day) then
      day = day - 1
    elseif instant >= boundary(rule, year, month, day + 1) then
      day = day + 1
    end
    return boundary(rule, year, month, day), boundary(rule, year, month, day + 1),
      boundary(rule, year, month, day + 2)
  end
  if per ~= "month" or (cycle ~= "calendar" and cycle ~= "billing") then
    error("no period " .. tostring(per) .. " per " .. tostring(cycle) .. " cycle")
  end
  local anchor = cycle == "billing" and (billing_day or 1) or 1
  if instant < cycle_start(rule, year, month, anchor) then
    month = month - 1
  elseif instant >= cycle_start(rule, year, month + 1, anchor) then
    month = month + 1
  end
  return cycle_start(rule, year, month, anchor), cycle_start(rule, year, month + 1, anchor),
    cycle_start(rule, year, month + 2, anchor)
end

return _M

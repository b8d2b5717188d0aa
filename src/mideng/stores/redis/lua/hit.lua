-- Sliding-window debounce. KEYS[1] a sorted set of hit times. ARGV: window seconds, limit.
-- Reply: nil when the hit counts, else the seconds until the oldest counted hit leaves the
-- window, as a string (Lua numbers would be truncated to integers on the way out).
-- Its scores and answer are seconds (decimal()), not the records' stamps.
local key = KEYS[1]
local now = clock()
local at = decimal(now)
local window, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', decimal(now - window))
local count = redis.call('ZCARD', key)
if count >= limit then
  local oldest = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
  local wait = tonumber(oldest[2]) + window - now
  if wait < 0.001 then
    wait = 0.001
  end
  return decimal(wait)
end
-- Hits in the same microsecond still need distinct members; the count tells them apart.
redis.call('ZADD', key, at, at .. '#' .. count)
redis.call('PEXPIREAT', key, math.ceil((now + window) * 1000))
return false

-- Record a failure that duplicates replay. KEYS[1] the record. ARGV: owner, fence, error,
-- ttl ('' = never expires). Reply as complete.lua, with the error left out.
local key = KEYS[1]
local now, at = clock()
local rec = read(key)
if not holds(rec, now, ARGV[1], ARGV[2]) then
  return reply(0, rec)
end
local ttl = tonumber(ARGV[4])
local new = {unpack(rec, 1, 13)}
new[S], new[E], new[R], new[C], new[LU], new[UA] = 'failed', ARGV[3], false, false, false, at
new[EA] = ttl and stamp(now + ttl) or false
save(key, rec, new)
new[E] = false
return reply(1, new)

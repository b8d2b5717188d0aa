-- Record a failure that duplicates replay. KEYS[1] the record. ARGV: owner, fence, error,
-- ttl ('' = never expires). Reply as complete.lua, with the error left out.
local key = KEYS[1]
local rec, now, at = held(key, ARGV[1], ARGV[2])
if not now then
  return reply(0, rec)
end
local new = finished(rec, now, at, 'failed', false, false, ARGV[3], tonumber(ARGV[4]))
save(key, rec, new)
new[E] = false
return reply(1, new)

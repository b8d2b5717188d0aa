-- Extend a live claim. KEYS[1] the record. ARGV: owner, fence, lease, ttl ('' = never
-- expires). Reply: code 1 and the record, or code 0 and the current record (lease lost).
local key = KEYS[1]
local rec, now, at = held(key, ARGV[1], ARGV[2])
if not now then
  return reply(0, rec)
end
local lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local new = {unpack(rec, 1, NFIELDS)}
new[LU], new[UA] = stamp(now + lease), at
-- A record that was never meant to expire (unknown policy, or no ttl) stays that way.
if rec[EA] and ttl then
  new[EA] = stamp(now + lease + ttl)
else
  new[EA] = false
end
save(key, rec, new)
return reply(1, new)

-- Store a result while the ticket is live. KEYS[1] the record. ARGV: owner, fence, result,
-- codec, ttl ('' = never expires). Reply: code 1 and the record without its result (the caller
-- has it; echoing it would double the bytes), or code 0 and the current record (lease lost).
local key = KEYS[1]
local rec, now, at = held(key, ARGV[1], ARGV[2])
if not now then
  return reply(0, rec)
end
local new = finished(rec, now, at, 'succeeded', ARGV[3], ARGV[4], false, tonumber(ARGV[5]))
save(key, rec, new)
new[R] = false
return reply(1, new)

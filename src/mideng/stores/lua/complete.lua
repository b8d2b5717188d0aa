-- Store a result while the ticket is live. KEYS[1] the record. ARGV: owner, fence, result,
-- codec, ttl ('' = never expires). Reply: code 1 and the record without its result (the caller
-- has it; echoing it would double the bytes), or code 0 and the current record (lease lost).
local key = KEYS[1]
local now, at = clock()
local rec = read(key)
if not holds(rec, now, ARGV[1], ARGV[2]) then
  return reply(0, rec)
end
local ttl = tonumber(ARGV[5])
local new = {unpack(rec, 1, 13)}
new[S], new[R], new[C], new[E], new[LU], new[UA] = 'succeeded', ARGV[3], ARGV[4], false, false, at
new[EA] = ttl and stamp(now + ttl) or false
save(key, rec, new)
new[R] = false
return reply(1, new)

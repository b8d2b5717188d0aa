-- Store a result while the ticket is live. KEYS[1] the record. ARGV: owner, fence, result,
-- codec, ttl ('' = never expires). Reply: code 1 and the record without its result (the caller
-- has it; echoing it would double the bytes), or code 0 and the current record (lease lost).
local now, at = clock()
local ttl = tonumber(ARGV[5])
local ea = ttl and stamp(now + ttl) or false
local code, rec = complete(KEYS[1], now, at, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ea)
if code == 1 then
  rec = completed(rec, false, ARGV[4], at, ea)
end
return reply(code, rec)

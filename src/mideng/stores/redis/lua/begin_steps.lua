-- Keep a multi-step operation's arguments (the first ones stay) and answer its recorded steps,
-- while owner holds the live claim. KEYS[1] the record, KEYS[2] its steps hash (one field per
-- step, '' for the arguments; values 'at|#codec|codec result'). ARGV: owner, arguments, codec.
-- Reply: the steps hash as HGETALL gives it; nil when owner does not hold the claim.
local now, at = clock()
local rec = read(KEYS[1])
if not rec or expired(rec, now) or rec[S] ~= 'processing' or rec[O] ~= ARGV[1] then
  return false
end
redis.call('HSETNX', KEYS[2], '', at .. '|' .. #ARGV[3] .. '|' .. ARGV[3] .. ARGV[2])
return redis.call('HGETALL', KEYS[2])

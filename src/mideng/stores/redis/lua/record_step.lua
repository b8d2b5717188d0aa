-- Record a finished step while owner holds the live claim; a zombie's step never lands.
-- KEYS[1] the record, KEYS[2] its steps hash. ARGV: owner, step, result, codec.
-- Reply: 1 recorded, 0 refused (the claim is not owner's).
local now, at = clock()
local rec = read(KEYS[1])
if not rec or expired(rec, now) or rec[S] ~= 'processing' or rec[O] ~= ARGV[1] then
  return 0
end
redis.call('HSETNX', KEYS[2], ARGV[2], at .. '|' .. #ARGV[4] .. '|' .. ARGV[4] .. ARGV[3])
return 1

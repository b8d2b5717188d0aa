-- Drop a live claim so a retry runs again. KEYS[1] the record. ARGV: owner, fence.
-- Reply: code 1 (released), or code 0 and the current record (lease lost).
local key = KEYS[1]
local rec, now = held(key, ARGV[1], ARGV[2])
if not now then
  return reply(0, rec)
end
redis.call('DEL', key)
return reply(1)

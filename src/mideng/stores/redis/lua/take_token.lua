-- Consume an anti-resubmit token: compare and delete in one step, never GET-then-DEL.
-- KEYS[1] the token. ARGV: the token the caller presents. Reply: 1 taken, 0 refused.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

-- Settle an UNKNOWN record, a processing one whose lease ran out, or a kept failure (a task
-- out of attempts), after asking the provider.
-- KEYS[1] the record. ARGV: result (optional), codec (optional), failed ('1', '0', or '2':
-- evict, the record deleted), ttl ('' = never expires), the status and fence the operator saw
-- ('' '': any). Reply: code 1 and the settled (or evicted) record, or code 0 and the current
-- one (absent, not resolvable, or no longer as seen); either way with the store's time as the
-- extra field.
local key = KEYS[1]
local now, at = clock()
local rec = read(key)
local open = rec and not expired(rec, now) and (rec[S] == 'unknown'
  or (rec[S] == 'processing' and not lease_live(rec, now)) or (rec[S] == 'failed' and rec[E]))
if open and ARGV[5] ~= '' and (rec[S] ~= ARGV[5] or rec[F] ~= ARGV[6]) then
  open = false
end
if not open then
  return reply(0, rec, at)
end
if ARGV[3] == '2' then
  redis.call('DEL', key)
  return reply(1, rec, at)
end
local ttl = tonumber(ARGV[4])
local new = {unpack(rec, 1, NFIELDS)}
new[LU], new[UA], new[E] = false, at, false
new[EA] = ttl and stamp(now + ttl) or false
if ARGV[3] == '1' then
  new[S], new[R], new[C] = 'failed', false, false
else
  new[S], new[R], new[C] = 'succeeded', opt(ARGV[1]), opt(ARGV[2])
end
save(key, rec, new)
return reply(1, new, at)

-- Claim (scope, key): read, decide, write, answer; mideng.core.decide.decide, rule for rule.
-- KEYS[1] the record. ARGV: owner, lease, ttl ('' = never expires), fingerprint (optional),
-- on_expiry ('u' unknown, 't' take over), request_id (optional), max_attempts (a recorded
-- failure from fewer attempts runs again; '0' never).
-- Reply: the record with code 0 acquired, 1 replay, 2 in progress, 3 mismatch, 4 unresolved.
local key = KEYS[1]
local now, at = clock()
local rec = read(key)
local fingerprint = opt(ARGV[4])
local unknown_policy = ARGV[5] == 'u'

local function acquire(prev)
  local lease, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
  local expires = false
  -- A processing record outlives its lease so a crashed holder's key cannot vanish; under the
  -- unknown policy it never expires by itself (only resolve ends it).
  if not unknown_policy and ttl then
    expires = stamp(now + lease + ttl)
  end
  local new = {unpack(NONE, 1, NFIELDS)}
  new[S], new[O], new[FP], new[LU], new[RID] = 'processing', ARGV[1], fingerprint,
    stamp(now + lease), opt(ARGV[6])
  new[UA], new[EA] = at, expires
  if prev then
    -- An expired or taken-over record keeps counting, so an old ticket never matches again.
    new[F] = tostring(tonumber(prev[F]) + 1)
    new[A] = tostring(tonumber(prev[A]) + 1)
    new[CA] = prev[CA]
  else
    new[F], new[A], new[CA] = '1', '1', at
  end
  save(key, prev, new)
  return reply(0, new)
end

local function answer(outcome, current)
  if fingerprint and current[FP] and fingerprint ~= current[FP] then
    outcome = 3
  end
  return reply(outcome, current)
end

if not rec or expired(rec, now) then
  return acquire(rec)
end
local status = rec[S]
if status == 'processing' and not lease_live(rec, now) then
  if unknown_policy then
    local unknown = {unpack(rec, 1, NFIELDS)}
    unknown[S], unknown[LU], unknown[UA], unknown[EA] = 'unknown', false, at, false
    save(key, rec, unknown)
    return answer(4, unknown)
  end
  return acquire(rec)
end
if status == 'failed' and (not rec[E] or tonumber(rec[A]) < tonumber(ARGV[7])) then
  return acquire(rec)
end
local outcomes = {processing = 2, succeeded = 1, failed = 1, unknown = 4}
return answer(outcomes[status], rec)

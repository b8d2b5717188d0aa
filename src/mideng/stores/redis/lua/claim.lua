-- Claim (scope, key): the head's claim() on one key. KEYS[1] the record. ARGV: owner, lease,
-- ttl ('' = never expires), fingerprint (optional), on_expiry ('u' unknown, 't' take over),
-- request_id (optional), max_attempts (a recorded failure from fewer attempts runs again; '0'
-- never).
-- Reply: the record with code 0 acquired, 1 replay, 2 in progress, 3 mismatch, 4 unresolved.
local now, at = clock()
local terms = terms_of(now, ARGV[2], ARGV[3], ARGV[5], ARGV[7])
terms.owner, terms.fp, terms.rid = ARGV[1], opt(ARGV[4]), opt(ARGV[6])
local code, rec = claim(KEYS[1], now, at, terms)
return reply(code, rec or claimed(false, at, terms))

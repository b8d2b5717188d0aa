-- Claim many keys at once: the head's claim() on each, with one clock and one set of terms.
-- KEYS the records. ARGV: lease, ttl ('' = never expires), on_expiry, max_attempts (as in
-- claim.lua), then for each key its owner, fingerprint (optional) and request_id (optional).
-- Reply, one string: at|lu|ea|#1|...|#n (the clock, a new claim's lease and expiry stamps,
-- each key's answer's length), a newline, then the answers back to back, in KEYS order:
-- '' for a new key acquired (all the rest follows from the request, the terms and the clock),
-- '0|fence|attempts|created_at' for a key acquired over an old record, reply() of the outcome
-- and the record for any other outcome (replay, in progress, mismatch, unresolved).
local now, at = clock()
local terms = terms_of(now, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local head, items = {at, terms.lu, terms.ea or ''}, {}
for i = 1, #KEYS do
  local j = 3 * i + 2
  terms.owner, terms.fp, terms.rid = ARGV[j], opt(ARGV[j + 1]), opt(ARGV[j + 2])
  local code, rec = claim(KEYS[i], now, at, terms)
  local item = ''
  if code ~= 0 then
    item = reply(code, rec)
  elseif rec then  -- acquired over an old record (a new key's is false)
    item = '0|' .. rec[F] .. '|' .. rec[A] .. '|' .. rec[CA]
  end
  head[i + 3], items[i] = #item, item
end
return table.concat(head, '|') .. '\n' .. table.concat(items)

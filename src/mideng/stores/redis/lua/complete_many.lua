-- Complete many claims at once: the head's complete() on each, with one clock; each key is
-- fenced on its own ticket, so a lost claim changes nothing and the others still complete.
-- KEYS the records. ARGV: codec, ttl ('' = never expires), then for each key its owner, fence
-- and result.
-- Reply, one string: at|ea|#1|...|#n (the clock, a completed record's expiry stamp, each
-- key's answer's length), a newline, then the answers back to back, in KEYS order:
-- '1|attempts|created_at|#fp|#rid|' .. fp .. rid for a key completed (the rest follows from
-- the ticket, the completion and the clock; an absent field's length is '-'), reply(0, rec)
-- for a ticket that no longer holds its key (lease lost).
local now, at = clock()
local codec, ttl = ARGV[1], tonumber(ARGV[2])
local ea = ttl and stamp(now + ttl) or false
local head, items = {at, ea or ''}, {}
for i = 1, #KEYS do
  local j = 3 * i
  local code, rec = complete(KEYS[i], now, at, ARGV[j], ARGV[j + 1], ARGV[j + 2], codec, ea)
  local item
  if code == 1 then  -- rec: the ticket's fields as complete() read them
    local fp, rid = rec[T_FP], rec[T_RID]
    item = '1|' .. rec[T_A] .. '|' .. rec[T_CA] .. '|' .. (fp and #fp or '-') .. '|'
      .. (rid and #rid or '-') .. '|' .. (fp or '') .. (rid or '')
  else
    item = reply(0, rec)
  end
  head[i + 2], items[i] = #item, item
end
return table.concat(head, '|') .. '\n' .. table.concat(items)

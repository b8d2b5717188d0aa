-- Read a record as the store's clock sees it. KEYS[1] the record.
-- Reply: code 1 and the record, or code 0 when it is absent or expired.
local rec = read(KEYS[1])
if not rec or expired(rec, clock()) then
  return reply(0)
end
return reply(1, rec)

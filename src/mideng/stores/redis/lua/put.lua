-- Keep a copy of a finished record (the hybrid store's fast path). KEYS[1] the record.
-- ARGV: every record field, in FIELDS order, each optional. A copy never replaces a newer one,
-- so a slow writer cannot bring back a record that was since replaced.
-- Reply: 1 written, 0 kept the newer copy.
local key = KEYS[1]
local current = read(key)
local rec = {}
for i = 1, NFIELDS do
  rec[i] = opt(ARGV[i])
end
if current and seconds(current[UA]) > seconds(rec[UA]) then
  return 0
end
save(key, current, rec)
return 1

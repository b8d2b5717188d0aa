-- The head of every operation: run once when the function library is loaded (Redis 7+), or
-- in front of each operation's own script on servers that only have EVALSHA.
--
-- A record is one hash. Its fields and their order are mideng.stores.redis.rows.FIELDS, the one
-- definition Python and this code share; the line below becomes their declarations when the
-- code is loaded: FIELDS (the names, in order), a constant per field holding its position and
-- named as the field in capitals (S for 's', RID for 'rid' ...), NFIELDS (how many) and NONE
-- (an absent record). Every redis.call and every string.format costs real time inside the
-- server's single thread, so scripts read once, write only the fields that changed, and touch
-- the key's TTL only when it changes.
--@fields

-- Times are epoch seconds written as '%.6f' (Redis TIME has microseconds).
local function stamp(t)
  return string.format('%.6f', t)
end

-- The store's clock, as a number and as the stamp to write; the number is parsed from the
-- stamp, so what a script compares is exactly what the client will decode.
local function clock()
  local t = redis.call('TIME')
  local at = t[1] .. '.' .. string.sub('00000' .. t[2], -6)
  return tonumber(at), at
end

-- Optional strings arrive as '' (absent) or '=' .. value, so an empty value stays a value.
local function opt(arg)
  if arg == '' then
    return false
  end
  return string.sub(arg, 2)
end

local function read(key)
  local rec = redis.call('HMGET', key, unpack(FIELDS))
  if not rec[S] then
    return false
  end
  return rec
end

local function expired(rec, now)
  return rec[EA] ~= false and tonumber(rec[EA]) <= now
end

local function lease_live(rec, now)
  return rec[LU] ~= false and tonumber(rec[LU]) > now
end

-- A ticket is live while its owner and fence are the record's and the record still processes.
local function holds(rec, now, owner, fence)
  return rec ~= false and not expired(rec, now) and rec[S] == 'processing'
    and rec[O] == owner and rec[F] == fence
end

-- The record at key with the store's clock while (owner, fence) holds it; without a clock
-- (only the record as it now is) when the ticket was lost.
local function held(key, owner, fence)
  local now, at = clock()
  local rec = read(key)
  if not holds(rec, now, owner, fence) then
    return rec
  end
  return rec, now, at
end

-- A held record finished as status: result or error kept, no lease, expiring ttl seconds
-- from now (never, without a ttl).
local function finished(rec, now, at, status, result, codec, err, ttl)
  local new = {unpack(rec, 1, NFIELDS)}
  new[S], new[R], new[C], new[E], new[LU], new[UA] = status, result, codec, err, false, at
  new[EA] = ttl and stamp(now + ttl) or false
  return new
end

-- Write what differs between the stored record (old, false when absent) and rec.
local function save(key, old, rec)
  old = old or NONE
  local set, drop, ns, nd = {}, {}, 0, 0
  for i = 1, NFIELDS do
    local v = rec[i]
    if v ~= old[i] then
      if v then
        set[ns + 1], set[ns + 2], ns = FIELDS[i], v, ns + 2
      else
        drop[nd + 1], nd = FIELDS[i], nd + 1
      end
    end
  end
  if nd > 0 then
    redis.call('HDEL', key, unpack(drop))
  end
  if ns > 0 then
    redis.call('HSET', key, unpack(set))
  end
  -- The key lives as long as the record. Rounding up to the next millisecond means Redis never
  -- drops a key its record still calls live; in the sliver between, scripts see it as expired.
  -- (A whole number of milliseconds below 1e14 converts to its exact digits.)
  if rec[EA] then
    if rec[EA] ~= old[EA] then
      redis.call('PEXPIREAT', key, math.ceil(tonumber(rec[EA]) * 1000))
    end
  elseif old[EA] then
    redis.call('PERSIST', key)
  end
end

-- The reply is one string, so the client parses one bulk reply instead of a 14-element array:
--   code|extra|s|f|a|ca|ua|ea|lu|#o|#fp|#rid|#c|#r|#e \n o fp rid c r e
-- where an absent optional field has length '-' (and an absent time is empty). Without a
-- record the reply is just code|extra. It is built by one table.concat: no string is copied
-- twice, which matters for a large result.
local function reply(code, rec, extra)
  extra = extra or ''
  if not rec then
    return code .. '|' .. extra
  end
  local o, fp, rid, c, r, e = rec[O], rec[FP], rec[RID], rec[C], rec[R], rec[E]
  return table.concat({code, '|', extra, '|', rec[S], '|', rec[F], '|', rec[A], '|', rec[CA],
                       '|', rec[UA], '|', rec[EA] or '', '|', rec[LU] or '', '|', #o,
                       '|', fp and #fp or '-', '|', rid and #rid or '-', '|', c and #c or '-',
                       '|', r and #r or '-', '|', e and #e or '-', '\n',
                       o, fp or '', rid or '', c or '', r or '', e or ''})
end

-- ---------------------------------------------------------------------------------------------

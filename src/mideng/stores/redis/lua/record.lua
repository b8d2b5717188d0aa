-- The head of every operation: run once when the function library is loaded (Redis 7+), or
-- in front of each operation's own script on servers that only have EVALSHA.
--
-- A record is one hash. Its fields and their order are mideng.stores.redis.rows.FIELDS, the one
-- definition Python and this code share; the line below becomes their declarations when the
-- code is loaded: FIELDS (the names, in order), a constant per field holding its position and
-- named as the field in capitals (S for 's', RID for 'rid' ...), NFIELDS (how many), NONE
-- (an absent record), and for key layout 2: XNAME (rows.CUT), X (where read() puts its
-- value), INLINE (rows.INLINE), PIECES (rows.PIECES) and IN_PIECES (rows.IN_PIECES).
--
-- Key layout 2 cuts a result or error longer than INLINE bytes into pieces of INLINE bytes,
-- kept in the same hash under the field names '1', '2', ...; XNAME then says which field was
-- cut, and in how many ('r32': the result, in 32 pieces), and the cut field holds IN_PIECES
-- under its own name, a byte no codec decodes: a process of layout 1, which reads only the
-- field, then fails to replay the value instead of replaying it as empty (or, for an error,
-- running the body again as if none had been recorded). One value longer than the server's
-- hash-max-listpack-value (64) would make the whole hash a hashtable, three times the memory;
-- pieces keep it a listpack, and the record stays one key: one expiry, one DEL, nothing that
-- can expire or be evicted apart. Only read() and save() (and complete(), the fast path) know
-- it: every other part of a script sees a record with its result and error whole. A value in
-- more than PIECES pieces stays whole (the hash would pass hash-max-listpack-entries anyway).
--
-- Every redis.call and every string.format costs real time inside the server's single thread,
-- so scripts read once, write only the fields that changed, and touch the key's TTL only when
-- it changes.
--@fields

-- Times are written as whole epoch microseconds (Redis TIME has microseconds): a listpack
-- keeps such a number as an entry of 10 bytes, where layout 1's seconds text ('%.6f') took 19. Scripts
-- compute in seconds; a time layout 1 wrote (it has a '.') is read as it is.
local function stamp(t)
  return string.format('%.0f', t * 1000000)
end

-- Seconds as text with microseconds: a debounce window's scores and answer (hit.lua).
local function decimal(t)
  return string.format('%.6f', t)
end

-- A stored time in seconds.
local function seconds(v)
  if string.find(v, '^%d+$') then
    return tonumber(v) / 1000000
  end
  return tonumber(v)
end

-- The store's clock, as a number and as the stamp to write; the number is parsed from the
-- stamp, so what a script compares is exactly what the client will decode.
local function clock()
  local t = redis.call('TIME')
  local at = t[1] .. string.sub('00000' .. t[2], -6)
  return tonumber(at) / 1000000, at
end

-- Optional strings arrive as '' (absent) or '=' .. value, so an empty value stays a value.
local function opt(arg)
  if arg == '' then
    return false
  end
  return string.sub(arg, 2)
end

-- The fields an HMGET of a record asks for: FIELDS, then XNAME (at X).
-- (Built by hand: a function library's loading code has no unpack or table library.)
local READ = {}
for i = 1, NFIELDS do
  READ[i] = FIELDS[i]
end
READ[X] = XNAME
-- A cut field's name -> its position.
local CUT_AT = {[FIELDS[R]] = R, [FIELDS[E]] = E}

-- The field names of pieces 1..n, made once per n (a function library keeps them between
-- calls): a replay of a 2 kB result would otherwise make 32 names each time.
local PIECE_NAMES = {}
local function piece_names(n)
  local names = PIECE_NAMES[n]
  if not names then
    names = {}
    for i = 1, n do
      names[i] = tostring(i)
    end
    PIECE_NAMES[n] = names
  end
  return names
end

-- A record's XNAME value -> the position of the field cut and its number of pieces; false, 0
-- for a record with none; false, n for pieces no field is cut into any more (read()).
local function cut_of(x)
  if not x then
    return false, 0
  end
  local name, n = string.match(x, '^(%a*)(%d+)$')
  return CUT_AT[name] or false, tonumber(n) or 0
end

-- The record at key, its cut field joined again; rec[X] says whether one was cut.
local function read(key)
  local rec = redis.call('HMGET', key, unpack(READ))
  if not rec[S] then
    return false
  end
  if rec[X] then
    local at, n = cut_of(rec[X])
    if at and rec[at] == IN_PIECES then
      rec[at] = table.concat(redis.call('HMGET', key, unpack(piece_names(n))))
    else
      -- A layout-1 process wrote the field over since: it holds the value, and the pieces
      -- are stale, for the next save() to drop.
      rec[X] = tostring(n)
    end
  end
  return rec
end

-- The number of pieces a value is cut into; 0: it stays whole.
local function pieces(v)
  if not v or #v <= INLINE then
    return 0
  end
  local n = math.ceil(#v / INLINE)
  return n <= PIECES and n or 0
end

-- The field of rec to cut (R or E; a record has one or the other, never both) and into how
-- many pieces; false, 0 when neither is.
local function cut(rec)
  local n = pieces(rec[R])
  if n > 0 then
    return R, n
  end
  n = pieces(rec[E])
  if n > 0 then
    return E, n
  end
  return false, 0
end

-- HSET arguments for v cut in n pieces, appended to set (ns of them so far); the new count.
local function put_pieces(set, ns, v, n)
  for i = 1, n do
    set[ns + 1], set[ns + 2], ns = tostring(i), string.sub(v, i * INLINE - INLINE + 1, i * INLINE),
      ns + 2
  end
  return ns
end

-- HDEL arguments for the pieces after the first n of old_n, appended to drop; the new count.
local function drop_pieces(drop, nd, n, old_n)
  for i = n + 1, old_n do
    drop[nd + 1], nd = tostring(i), nd + 1
  end
  return nd
end

local function expired(rec, now)
  return rec[EA] ~= false and seconds(rec[EA]) <= now
end

local function lease_live(rec, now)
  return rec[LU] ~= false and seconds(rec[LU]) > now
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

-- The PEXPIREAT argument for an expiry stamp. Rounding up to the next millisecond means Redis
-- never drops a key its record still calls live; in the sliver between, scripts see it as
-- expired. (A whole number of milliseconds below 1e14 converts to its exact digits; so does
-- one of microseconds divided by 1000.) A batch gives every key the same stamp, so the last one
-- made is kept rather than made again.
local last_ea, last_px = false, false
local function pexpire_at(ea)
  if ea ~= last_ea then
    local ms
    if string.find(ea, '^%d+$') then
      ms = math.ceil(tonumber(ea) / 1000)
    else
      ms = math.ceil(tonumber(ea) * 1000)
    end
    last_ea, last_px = ea, tostring(ms)
  end
  return last_px
end

-- Write what differs between the stored record (old, false when absent) and rec.
local function save(key, old, rec)
  old = old or NONE
  local was, was_n = cut_of(old[X])
  local at, n = cut(rec)
  if not was and ((old[R] and #old[R] > INLINE) or (old[E] and #old[E] > INLINE)) then
    -- A record layout 1 wrote with a long value whole: Redis never turns a hashtable back
    -- into a listpack, so the hash is written again whole.
    redis.call('DEL', key)
    old, was, was_n = NONE, false, 0
  end
  local set, drop, ns, nd = {}, {}, 0, 0
  for i = 1, NFIELDS do
    -- A field cut in pieces holds IN_PIECES under its own name.
    local v, o = rec[i], old[i]
    if i == at then
      v = IN_PIECES
    end
    if i == was then
      o = IN_PIECES
    end
    if v ~= o then
      if v then
        set[ns + 1], set[ns + 2], ns = FIELDS[i], v, ns + 2
      else
        drop[nd + 1], nd = FIELDS[i], nd + 1
      end
    end
  end
  if at and (at ~= was or rec[at] ~= old[at]) then
    ns = put_pieces(set, ns, rec[at], n)
    set[ns + 1], set[ns + 2], ns = XNAME, FIELDS[at] .. n, ns + 2
  elseif not at and old[X] then
    drop[nd + 1], nd = XNAME, nd + 1
  end
  nd = drop_pieces(drop, nd, n, was_n)
  if nd > 0 then
    redis.call('HDEL', key, unpack(drop))
  end
  if ns > 0 then
    redis.call('HSET', key, unpack(set))
  end
  -- The key lives as long as the record.
  if rec[EA] then
    if rec[EA] ~= old[EA] then
      redis.call('PEXPIREAT', key, pexpire_at(rec[EA]))
    end
  elseif old[EA] then
    redis.call('PERSIST', key)
  end
end

-- The record a claim makes of key, new (prev false) or over prev, on the claim's terms.
local function claimed(prev, at, terms)
  local new = {unpack(NONE, 1, NFIELDS)}
  new[S], new[O], new[FP], new[LU], new[RID] = 'processing', terms.owner, terms.fp, terms.lu,
    terms.rid
  new[UA], new[EA] = at, terms.ea
  if prev then
    -- An expired or taken-over record keeps counting, so an old ticket never matches again.
    new[F] = tostring(tonumber(prev[F]) + 1)
    new[A] = tostring(tonumber(prev[A]) + 1)
    new[CA] = prev[CA]
  else
    new[F], new[A], new[CA] = '1', '1', at
  end
  return new
end

-- A claim taking key over from prev (a record) on the claim's terms (see claim).
local function acquire(key, prev, at, terms)
  local new = claimed(prev, at, terms)
  save(key, prev, new)
  return 0, new
end

-- A claim of a new key: the record claimed(false, ...) gives, written by one HSET of its
-- fields as they are known here, without building the record's table or comparing it field by
-- field against an absent one (save()): in a batch of new keys, that was a third of the
-- script's time per key.
local function create(key, at, terms)
  local args = {FIELDS[S], 'processing', FIELDS[O], terms.owner, FIELDS[F], '1', FIELDS[A], '1',
                FIELDS[LU], terms.lu, FIELDS[CA], at, FIELDS[UA], at}
  local n = 14
  if terms.fp then
    args[n + 1], args[n + 2], n = FIELDS[FP], terms.fp, n + 2
  end
  if terms.rid then
    args[n + 1], args[n + 2], n = FIELDS[RID], terms.rid, n + 2
  end
  if terms.ea then
    args[n + 1], args[n + 2] = FIELDS[EA], terms.ea
  end
  redis.call('HSET', key, unpack(args))
  if terms.ea then
    redis.call('PEXPIREAT', key, pexpire_at(terms.ea))
  end
end

local OUTCOMES = {processing = 2, succeeded = 1, failed = 1, unknown = 4}

-- Claim key: read, decide, write; mideng.core.decide.decide, rule for rule. The claim's terms
-- are a table: owner, fp and rid (fingerprint and request id as opt() gives them), lu and ea
-- (the stamps a new claim's lease and expiry get from the clock now; ea false: the record is
-- not to expire by itself), unknown (the 'u' policy: a lapsed lease turns the record UNKNOWN)
-- and max (a recorded failure from fewer attempts runs again; 0 never). A batch makes the
-- stamps once and reuses the table key after key. Returns the outcome (0 acquired, 1 replay,
-- 2 in progress, 3 mismatch, 4 unresolved) and the record as it now stands, except that a new
-- key acquired answers false for its record (claimed(false, at, terms) is it), so a batch
-- builds no table for the keys its reply says nothing about.
local function claim(key, now, at, terms)
  -- Most claims are of new keys: EXISTS answers those for much less than an HMGET of every
  -- field (each field read is a value the server converts for Lua).
  if redis.call('EXISTS', key) == 0 then
    create(key, at, terms)
    return 0, false
  end
  local rec = read(key)
  if not rec or expired(rec, now) then
    return acquire(key, rec, at, terms)
  end
  local status, outcome = rec[S], nil
  if status == 'processing' and not lease_live(rec, now) then
    if not terms.unknown then
      return acquire(key, rec, at, terms)
    end
    local unknown = {unpack(rec, 1, NFIELDS)}
    unknown[S], unknown[LU], unknown[UA], unknown[EA] = 'unknown', false, at, false
    save(key, rec, unknown)
    rec, outcome = unknown, 4
  elseif status == 'failed' and (not rec[E] or tonumber(rec[A]) < terms.max) then
    return acquire(key, rec, at, terms)
  else
    outcome = OUTCOMES[status]
  end
  if terms.fp and rec[FP] and terms.fp ~= rec[FP] then
    outcome = 3
  end
  return outcome, rec
end

-- A claim's terms from its arguments: lease and ttl in seconds (ttl '' = never expires),
-- on_expiry ('u' unknown, 't' take over), max_attempts; owner, fingerprint and request id are
-- the caller's to set.
local function terms_of(now, lease, ttl, on_expiry, max_attempts)
  local unknown, l, t = on_expiry == 'u', tonumber(lease), tonumber(ttl)
  -- A processing record outlives its lease so a crashed holder's key cannot vanish; under the
  -- unknown policy it never expires by itself (only resolve ends it).
  local ea = false
  if not unknown and t then
    ea = stamp(now + l + t)
  end
  return {lu = stamp(now + l), ea = ea, unknown = unknown, max = tonumber(max_attempts)}
end

-- Store a result while (owner, fence) holds the key, expiring at the stamp ea (false: never):
-- code 1 and the ticket's fields as read (TICKET's order; completed() makes the finished
-- record of them), or code 0 and the record as it now is (lease lost).
--
-- The fields a held record loses or gets are known (finished(), save()), so it reads only what
-- the fence check and the answer need, and writes the rest without comparing: the same record
-- and expiry as save(finished()) gives, with one HMGET of fewer fields and no table copies. A
-- batch answers from the fields read (attempts, creation time, fingerprint, request id), so
-- it builds no record table per key either.
local TICKET = {FIELDS[S], FIELDS[O], FIELDS[F], FIELDS[EA], FIELDS[E], FIELDS[A], FIELDS[CA],
                FIELDS[FP], FIELDS[RID], XNAME}
local T_A, T_CA, T_FP, T_RID, T_X = 6, 7, 8, 9, 10

local function completed(got, result, codec, at, ea)
  local new = {unpack(NONE, 1, NFIELDS)}
  new[S], new[F], new[O], new[FP], new[R], new[C], new[A], new[RID], new[CA], new[UA], new[EA] =
    'succeeded', got[3], got[2], got[T_FP], result, codec, got[T_A], got[T_RID], got[T_CA], at,
    ea
  return new
end

-- complete()'s write of a result cut in n pieces, or over a record that had a cut field (x,
-- its CUT value): the fields to drop and set are gathered first.
local function complete_cut(key, at, result, codec, ea, old_ea, e, n, x)
  local drop, set = {FIELDS[LU]}, {FIELDS[S], 'succeeded', FIELDS[C], codec, FIELDS[UA], at}
  local nd, ns = 1, 6
  if e then
    drop[2], nd = FIELDS[E], 2
  end
  if n > 0 then
    ns = put_pieces(set, ns, result, n)
    set[ns + 1], set[ns + 2], set[ns + 3], set[ns + 4], ns = XNAME, FIELDS[R] .. n, FIELDS[R],
      IN_PIECES, ns + 4
  else
    set[ns + 1], set[ns + 2], ns = FIELDS[R], result, ns + 2
    drop[nd + 1], nd = XNAME, nd + 1
  end
  local _, was_n = cut_of(x)
  nd = drop_pieces(drop, nd, n, was_n)
  if ea then
    set[ns + 1], set[ns + 2] = FIELDS[EA], ea
  elseif old_ea then
    drop[nd + 1] = FIELDS[EA]
  end
  redis.call('HDEL', key, unpack(drop))
  redis.call('HSET', key, unpack(set))
  if ea then
    redis.call('PEXPIREAT', key, pexpire_at(ea))
  elseif old_ea then
    redis.call('PERSIST', key)
  end
end

local function complete(key, now, at, owner, fence, result, codec, ea)
  local got = redis.call('HMGET', key, unpack(TICKET))
  local s, o, f, old_ea, e = got[1], got[2], got[3], got[4], got[5]
  if s ~= 'processing' or o ~= owner or f ~= fence
    or (old_ea and tonumber(old_ea) <= now) then
    return 0, read(key)
  end
  local n = pieces(result)
  if n > 0 or got[T_X] then
    complete_cut(key, at, result, codec, ea, old_ea, e, n, got[T_X])
    return 1, got
  end
  -- A result kept whole: written without gathering tables (a batch of short results spends
  -- a sixth of its server time more with them).
  if e then
    redis.call('HDEL', key, FIELDS[LU], FIELDS[E])
  else
    redis.call('HDEL', key, FIELDS[LU])
  end
  if ea then
    redis.call('HSET', key, FIELDS[S], 'succeeded', FIELDS[R], result, FIELDS[C], codec,
               FIELDS[UA], at, FIELDS[EA], ea)
    redis.call('PEXPIREAT', key, pexpire_at(ea))
  else
    redis.call('HSET', key, FIELDS[S], 'succeeded', FIELDS[R], result, FIELDS[C], codec,
               FIELDS[UA], at)
    if old_ea then
      redis.call('HDEL', key, FIELDS[EA])
      redis.call('PERSIST', key)
    end
  end
  return 1, got
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

#include "common/state/scripts.h"

namespace h3pipe::state {

// The state machine's Lua side: the table itself stays in C++ (judge, job_state.h); a script is
// handed the states a move applies from and those it is already past, and keeps the run's
// counters in step with every applied move.
const char* const kMoveLua =
#include "common/queue/claim_order_lua.inc"
    R"LUA(
local function h3_in(list, s) return string.find(',' .. list .. ',', ',' .. s .. ',', 1, true) ~= nil end
local function h3_judge(job, apply_from, past_from)
  local from = redis.call('HGET', job, 'state')
  if not from or from == '' then from = 'none' end
  if h3_in(apply_from, from) then return 1, from end
  if h3_in(past_from, from) then return 3, from end
  return 2, from
end
local h3_tally = {done = 'done', failed = 'failed', cancelled = 'jobs_cancelled'}
local function h3_set(job, run, from, to)
  redis.call('HSET', job, 'state', to)
  if from ~= 'none' then redis.call('HINCRBY', run, 'n:' .. from, -1) else redis.call('HINCRBY', run, 'total', 1) end
  redis.call('HINCRBY', run, 'n:' .. to, 1)
  if h3_tally[from] then redis.call('HINCRBY', run, h3_tally[from], -1) end
  if h3_tally[to] then redis.call('HINCRBY', run, h3_tally[to], 1) end
end
local function h3_refused(run, from, to)
  redis.call('HINCRBY', run, 'illegal', 1)
  redis.call('HINCRBY', run, 'illegal:' .. from .. '>' .. to, 1)
end
local function h3_ours(stream, group, consumer, id)
  return #redis.call('XPENDING', stream, group, id, id, 1, consumer) == 1
end
local function h3_ack(stream, group, id)
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
end
local function h3_cmds(at, run_them)
  local n = tonumber(ARGV[at]); at = at + 1
  for c = 1, n do
    local argc = tonumber(ARGV[at]); at = at + 1
    if run_them then
      local cmd = {}
      for k = 1, argc do cmd[k] = ARGV[at + k - 1] end
      redis.call(unpack(cmd))
    end
    at = at + argc
  end
  return at
end
-- The start move of one attempt (Store::start_attempt): refused unless the job is at this stage
-- (then the entry, when given, is acked), else attempts++ and the run's cancel flag and the job's
-- last error read back.  With peek, also the stream's next entry after this one (the claim after
-- this task may then start it in its own round trip: Store::claim_and_start).
local function h3_start(job, run, stream, to, apply_from, attempts, group, consumer, id, peek)
  local v, from = h3_judge(job, apply_from, '')
  if v == 2 then
    if stream and h3_ours(stream, group, consumer, id) then h3_ack(stream, group, id) end
    h3_refused(run, from, to)
    return {2, from, 0, '', ''}
  end
  if from ~= to then h3_set(job, run, from, to) end
  local n = redis.call('HINCRBY', job, attempts, 1)
  local out = {1, from, n, redis.call('HGET', run, 'cancelled') or '', redis.call('HGET', job, 'error') or ''}
  if peek and stream then
    local nx = redis.call('XRANGE', stream, '(' .. id, '+', 'COUNT', 1)
    if #nx == 1 and nx[1][2] then
      for i = 1, #nx[1][2], 2 do
        if nx[1][2][i] == 'task' then out[6] = nx[1][1]; out[7] = nx[1][2][i + 1] end
      end
    end
  end
  return out
end
-- One move with its ack and commands (Store::apply); ARGV as kApplyScript's, the record commands
-- from ARGV[at] on.  Returns {code, from} (Applied).
local function h3_apply(at)
  local ack = ARGV[4] == '1'
  if ack and not h3_ours(KEYS[3], ARGV[5], ARGV[6], ARGV[7]) then return {0, ''} end
  if ARGV[8] == 'cancelled' and redis.call('HGET', KEYS[2], 'cancelled') ~= '1' then return {4, ''} end
  local v, from = h3_judge(KEYS[1], ARGV[2], ARGV[3])
  if ack then h3_ack(KEYS[3], ARGV[5], ARGV[7]) end
  if v == 2 then h3_refused(KEYS[2], from, ARGV[1]); return {2, from} end
  if v == 1 then h3_set(KEYS[1], KEYS[2], from, ARGV[1]) end
  at = h3_cmds(at, true)
  h3_cmds(at, v == 1)
  return {v, from}
end
-- The task field of a stream entry ('' for an entry without one).
local function h3_task(e)
  if e[2] then
    for i = 1, #e[2], 2 do if e[2][i] == 'task' then return e[2][i + 1] end end
  end
  return ''
end
-- The claim of a consumer whose own pending entries are drained, in StageQueue::claim()'s order:
-- with sweep_idle set (a sweep is due), another consumer's expired lease first (XAUTOCLAIM), then a
-- new entry: with an order (a stage stream's), the one the claim order takes (h3o_take,
-- docs/design.md "The claim order"), else XREADGROUP > (never blocking inside a script).  Returns
-- the entry and 1 when it was reclaimed, 0 when new; nil: nothing.
local function h3_claim(stream, group, consumer, sweep_idle, share, order)
  if sweep_idle ~= '' then
    local a = redis.call('XAUTOCLAIM', stream, group, consumer, sweep_idle, '0-0', 'COUNT', '1')
    if a[2] and #a[2] > 0 then return a[2][1], 1 end
  end
  if order and order ~= '' then
    local e = h3o_take(stream, group, consumer, share, order)
    return e, 0
  end
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', '1', 'STREAMS', stream, '>')
  if not r or not r[1] or #r[1][2] == 0 then return nil, 0 end
  return r[1][2][1], 0
end
)LUA";

// KEYS: job, run [, stream].  ARGV: to, apply-from, past-from, ack (0|1), group, consumer, id,
// guard ('' | 'cancelled'), record commands, next commands.  Returns {code, from} (Applied).
const std::string kApplyScript = std::string(kMoveLua) + R"LUA(
return h3_apply(9)
)LUA";

// A completion and the claim right after it, in one step (Store::apply with Move::then_claim):
// the move exactly as kApplyScript makes it, then the consumer's next entry as claim() takes it
// once its own pending entries are drained (with a sweep due, an expired lease first), started
// when it is the entry the task's start saw next.  KEYS: job, run, stream, next job, next run,
// the stream's share hash.  ARGV: kApplyScript's 1-8, sweep idle ms ('' = no sweep), expected id,
// start to, start apply-from, attempts field, claim order ('' = XREADGROUP >), then the record
// and next commands.  Returns {code, from [, id,
// task, reclaimed (0|1) [, start reply...]]}.
const std::string kApplyClaimScript = std::string(kMoveLua) + R"LUA(
local out = h3_apply(15)
local e, reclaimed = h3_claim(KEYS[3], ARGV[5], ARGV[6], ARGV[9], KEYS[6], ARGV[14])
if not e then return out end
out[3] = e[1]; out[4] = h3_task(e); out[5] = reclaimed
if reclaimed == 0 and e[1] == ARGV[10] then
  local s = h3_start(KEYS[4], KEYS[5], KEYS[3], ARGV[11], ARGV[12], ARGV[13], ARGV[5], ARGV[6], e[1], true)
  for i = 1, #s do out[5 + i] = s[i] end
end
return out
)LUA";

// KEYS: job, run [, stream].  ARGV: to, apply-from, attempts field, group, consumer, id, peek
// (0|1). Returns {code, from, attempt, cancelled flag, last error [, next id, next task]}.
const std::string kStartScript = std::string(kMoveLua) + R"LUA(
return h3_start(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7] == '1')
)LUA";

// The claim of the next new entry (XREADGROUP >, never blocking inside a script) and, when it is
// the entry the previous start saw next (its job's keys are declared), that entry's start move in
// the same step.  KEYS: stream, job, run (of the expected entry), the stream's share hash.  ARGV:
// group, consumer, expected id, to, apply-from, attempts field, claim order ('' = XREADGROUP >).
// Returns {} (nothing new), {id, task} (another entry: its start is the caller's), or {id, task,
// start reply...} (kStartScript's reply, with the peek).
const std::string kClaimStartScript = std::string(kMoveLua) + R"LUA(
local e = h3_claim(KEYS[1], ARGV[1], ARGV[2], '', KEYS[4], ARGV[7])
if not e then return {} end
local task = h3_task(e)
if e[1] ~= ARGV[3] then return {e[1], task} end
local s = h3_start(KEYS[2], KEYS[3], KEYS[1], ARGV[4], ARGV[5], ARGV[6], ARGV[1], ARGV[2], e[1], true)
return {e[1], task, unpack(s)}
)LUA";

// Registers a job if new and enqueues its encode task: a crash never leaves a job without its
// task or a task without its job.  KEYS: job, run, run_jobs, runs, encode stream, run events.
// ARGV: spec, now, job_id, payload, run_id, then the video.queued event's fields (#37).  A job
// that exists is a resubmission: 0, no count, no event.
const std::string kAcceptScript = std::string(kMoveLua) + R"LUA(
local v, from = h3_judge(KEYS[1], 'none', '')
if v ~= 1 then return 0 end
local sp = cjson.decode(ARGV[1])
local id = redis.call('XADD', KEYS[5], '*', 'task', ARGV[4], 'prio', string.format('%d', tonumber(sp.priority) or 0), 'user', type(sp.user) == 'string' and sp.user or '', 'cls', type(sp.jobClass) == 'string' and sp.jobClass or '', 'run', ARGV[5], 'job', ARGV[3])
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'submitted_ms', ARGV[2], 'task:encode', id)
h3_set(KEYS[1], KEYS[2], 'none', 'queued')
redis.call('HSETNX', KEYS[2], 'created_ms', ARGV[2])
redis.call('ZADD', KEYS[3], 'NX', redis.call('HGET', KEYS[2], 'total'), ARGV[3])
redis.call('ZADD', KEYS[4], 'NX', ARGV[2], ARGV[5])
if #ARGV > 5 then redis.call('XADD', KEYS[6], 'MAXLEN', '~', '100000', '*', unpack(ARGV, 6)) end
return 1
)LUA";

}  // namespace h3pipe::state

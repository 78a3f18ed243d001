#pragma once
// A Redis reply's fields (hiredis's redisReply, REDIS_REPLY_*), for the code that reads replies:
// common/queue and common/state, which link hiredis PRIVATE, and tests that check what Redis
// holds.  Everything else calls their typed functions (scripts/layers.py checks it).
#include <hiredis/hiredis.h>

#include "common/queue/redis.h"

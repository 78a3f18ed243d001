#pragma once
// The job state machine's Lua scripts (scripts.cpp): the one writer of job state (Store, state.h)
// runs them; the table itself stays in C++ (judge, job_state.h).
#include <string>

namespace h3pipe::state {

extern const char* const kMoveLua;      // the shared functions every script below starts with
extern const std::string kApplyScript;  // one move (Store::apply)
extern const std::string
    kApplyClaimScript;                  // one move and the consumer's next claim (Move::then_claim)
extern const std::string kStartScript;  // the start of an attempt (Store::start_attempt)
extern const std::string
    kClaimStartScript;                   // the next new entry claimed and started (claim_and_start)
extern const std::string kAcceptScript;  // a submitted job accepted (Store::accept_job)

}  // namespace h3pipe::state

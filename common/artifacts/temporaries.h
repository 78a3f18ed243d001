#pragma once
// Internal to h3pipe::artifacts: the per-execution temporaries of a stage output (issue #35 D6).
// "NAME.<token>.part" holds the data (written by commit_part's rename, write_once, or streamed by
// the writer itself: own_part_path), "NAME.sha256.<token>.part" the pending sidecar; the token is
// "p<writer's pid>-<16 hex digits>", new for every execution.  The pid lets a later commit of NAME
// (or the next execution's prepare step) remove what a killed writer left; sweep_parts removes the
// rest after a day.
#include <cstddef>
#include <string>
#include <string_view>

namespace h3pipe::artifacts::temps {

// A fresh token of this process: "p<pid>-<16 random hex digits>".
std::string new_token();

// The writer's pid in a token, or 0 where the text is none of ours.
long writer_pid(std::string_view token);

// The token of `file` when it is a temporary of `name`, data ("NAME.<token>.part") or pending
// sidecar ("NAME.sha256.<token>.part"); empty otherwise.
std::string_view token_of(std::string_view file, std::string_view name);

// Removes, in the directory `dir_fd`, the temporaries of `name` whose writer no longer runs here
// (its pid names no process; never our own).  Returns how many were removed; the first one that
// could not be (other than already gone) is named in *failed with its errno in *failed_errno.
std::size_t remove_dead_writers(int dir_fd, const std::string& name, std::string* failed = nullptr,
                                int* failed_errno = nullptr);

}  // namespace h3pipe::artifacts::temps

#pragma once
// Trust in the state dir (issue #22).  What h3pipe reads back from <state> (stack.json and its
// sidecar, the Redis passwords, the ACL file, the run files) decides where the CLI sends the
// operator's password and which pid `stop` signals, so nobody but the caller (or root) may have
// been able to write it.  A path is trusted when
//   - every folder above the state dir is owned by the caller or root and is not writable by
//     group or others, unless it has the sticky bit (/tmp); a symlink on the way must be owned by
//     the caller or root, and the folders of its target are checked the same way;
//   - the state dir, and every folder between it and a file h3pipe reads or creates, is a folder
//     (not a symlink) owned by the caller or root and not writable by group or others;
//   - such a file is a regular file (not a symlink) owned by the caller or root and not writable
//     by group or others.
// A refusal is errc::state_dir::kUnsafe naming the path, its owner and its mode; the CLI exits 2.
// Checked before anything is read or written there: by start, stop, status, run, wait, cancel,
// resume, and by a service whose credentials the local stack put in the state dir.
#include <sys/types.h>

#include <filesystem>

#include "common/core/result.h"

namespace h3pipe::supervisor {

// The state dir and the folders above it.  A state dir that does not exist yet passes (its
// existing ancestors are checked): there is nothing in it to read.
Status check_state_dir(const std::filesystem::path& state_dir);

// `path` beneath `state_dir` and the folders between them (each must exist as a trusted folder;
// a missing one ends the walk: nothing below it exists).  `path` itself may be a folder or a
// regular file; a missing one passes.  A `path` outside the state dir is not checked here (it is
// the config's, trusted as the config is).  Call check_state_dir first.
Status check_in_state_dir(const std::filesystem::path& state_dir,
                          const std::filesystem::path& path);

// Whether `path` lies beneath `state_dir` (lexically, after making both absolute).
bool in_state_dir(const std::filesystem::path& state_dir, const std::filesystem::path& path);

// What `start` creates or reuses below the state dir: creates `dir` 0700 if missing; an existing
// one (and, when `recursive`, everything in it) owned by the caller loses its group and other
// bits (folders 0700, files 0600 or less); anything owned by another user, or by root and
// writable by group/others, or a symlink, is refused.
Status make_private_tree(const std::filesystem::path& state_dir, const std::filesystem::path& dir,
                         bool recursive);

// An open file of the stack (a reused log opened O_APPEND keeps its mode): refused unless owned
// by the caller or root and a regular file; its group and other bits are cleared.
Status tighten_fd(int fd, const std::filesystem::path& path);

}  // namespace h3pipe::supervisor

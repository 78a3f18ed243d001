#pragma once
// How every runtime reads what a job names (issue #22 item 1, docs/security.md "Paths").
//
// A job's referenceImage is opened once, at the time of use, beneath limits.input_roots
// (spec::open_input: openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or the O_NOFOLLOW walk), and
// its bytes are read only through that descriptor: never the path again (which a symlink swapped
// in after submission would redirect), never relative to the service's working directory (a
// relative path is looked up beneath the roots, as submission checked it).  The builtin encoder
// decodes from the descriptor (media::read_image(fd)), the sim encoder hashes its bytes, the exec
// runtime hands the command a private copy beside the output, and the comfyui runtime uploads
// them (comfyui_runtime.cpp).
//
// Thread-safe; no state.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/spec/input_file.h"

namespace h3pipe::runtime {

// The most a reference image may hold when a runtime reads it whole (sim, exec).
inline constexpr std::uint64_t kMaxReferenceBytes = 64ull << 20;

// The spec's referenceImage opened beneath `roots`.  Errors: runtime.permanent.input,
// "<who>: referenceImage <reason naming the path>" (a file outside the roots, a symlink, a
// directory or FIFO does not fix itself on a retry or a resume).
Result<spec::InputFile> open_reference(const pb::JobSpec& spec,
                                       const std::vector<std::filesystem::path>& roots,
                                       std::string_view who);

// The opened file's bytes (pread from offset 0), at most max_bytes (more: runtime.permanent.input).
Result<std::string> read_reference(const spec::InputFile& f, std::string_view who,
                                   std::uint64_t max_bytes = kMaxReferenceBytes);

// An artifact input (conditioning, latent) that cannot be read: the cause's own code when the
// catalogue says no retry can help it (latent.header_too_large, path.symlink), else runtime.input;
// the message is "<what> <path>: <cause>".
Error input_error(const Error& cause, std::string_view what, const std::filesystem::path& path);

}  // namespace h3pipe::runtime

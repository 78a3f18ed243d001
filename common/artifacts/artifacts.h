#pragma once
// Atomic artifacts (docs/design.md rule 2): NAME.part -> fsync -> rename -> fsync(dir), then the
// NAME.sha256 sidecar the same way.  Readers never see a partial file; a stage whose output and
// sidecar verify is done (rule 1).  Every function is thread-safe with respect to distinct paths.
// I/O errors (a read-only or full folder) are "io.<call>" naming the path and the errno text, and
// no .part (data or sidecar) outlives the call that failed: writers remove what they created, and
// commit_part removes the writer's .part on every error.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/artifacts/safe_path.h"
#include "common/core/result.h"

namespace h3pipe::artifacts {

namespace fs = std::filesystem;

// The configured directory an artifact must stay below (artifact_root, output_root, state_dir).
// Explicit, so that it never converts from a string by accident.  Functions taking a Root accept
// a final path that is absolute and lexically below root.path, or relative to it; every name
// below the root is resolved without following symlinks (safe_path.h), so a planted symlink, a
// "..", or an id that slipped past validation makes the call fail before anything is created
// outside the root.  The overloads without a Root treat the final path's parent directory as the
// trusted root: the file and its .part/.sha256 siblings are still never followed through a symlink.
struct Root {
  explicit Root(fs::path p) : path(std::move(p)) {}
  fs::path path;
};

inline constexpr std::size_t kMaxIdLength = 128;

// An id that becomes one path component (run id, job id): 1..128 chars of [A-Za-z0-9._-], not
// starting with '.', so it can never name a parent, a hidden file or leave its folder.
Status validate_id(std::string_view field, std::string_view id);

// root / a / b ... where every component passed validate_id.  Fails (never throws) otherwise.
Result<fs::path> join_under(const fs::path& root, std::initializer_list<std::string_view> parts);

fs::path part_path(const fs::path& final_path);
fs::path sidecar_path(const fs::path& final_path);

// Writes `bytes` to final_path atomically and its sidecar; returns the SHA-256 hex.  Creates the
// missing directories (with a Root: the root itself, then every directory below it, never through
// a symlink).
Result<std::string> write_atomic(const fs::path& final_path, std::span<const std::uint8_t> bytes);
inline Result<std::string> write_atomic(const fs::path& p, std::string_view s) {
  return write_atomic(p, {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}
Result<std::string> write_atomic(const Root& root, const fs::path& final_path,
                                 std::span<const std::uint8_t> bytes);
inline Result<std::string> write_atomic(const Root& root, const fs::path& p, std::string_view s) {
  return write_atomic(root, p, {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}

// Called by write_once / commit_part once the .part is durable and hashed, right before it is
// published; an error stops the publication (the .part is removed) and is returned.  The sim
// runtime holds here until its profile time is up, so that its output appears at the end of the
// stage as a real runtime's does.
using BeforePublish = std::function<Status()>;

// A stage output held in memory: like write_atomic, but committed once (see commit_part): if
// final_path already exists, nothing is replaced, its verified hash is returned and *reused set.
Result<std::string> write_once(const fs::path& final_path, std::span<const std::uint8_t> bytes,
                               bool* reused = nullptr);
Result<std::string> write_once(const Root& root, const fs::path& final_path,
                               std::span<const std::uint8_t> bytes, bool* reused = nullptr,
                               const BeforePublish& before_publish = {});
inline Result<std::string> write_once(const fs::path& p, std::string_view s,
                                      bool* reused = nullptr) {
  return write_once(p, {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, reused);
}

// For writers that stream into part_path(final_path) themselves (stage runtimes, libav): the .part
// becomes this execution's own temporary (NAME.<token>.part), is fsynced and hashed, its sidecar
// written to a pending NAME.sha256.<token>.part, the data renamed to final_path without ever
// replacing a file, and only then (the rename won) the pending sidecar renamed to NAME.sha256 and
// the directory fsynced: an output and its sidecar are published as one step per execution (issue
// #35 D6).  A final name found without its sidecar is completed only from a pending sidecar that
// vouches for its bytes (a commit cut between its renames); a stray file is never adopted.  If
// expected_sha256 is non-empty and the content differs, the .part is removed and an error
// returned: bad bytes never reach the final name.  If final_path already exists (another
// execution of the same stage committed first), the .part is discarded, the existing file's
// verified hash is returned and *reused is set: an output is written once.
Result<std::string> commit_part(const fs::path& final_path, std::string_view expected_sha256 = {},
                                bool* reused = nullptr);
Result<std::string> commit_part(const Root& root, const fs::path& final_path,
                                std::string_view expected_sha256 = {}, bool* reused = nullptr,
                                const BeforePublish& before_publish = {});

// This execution's own temporary for a writer that streams final_path's bytes itself (a stage
// runtime, libav, an exec child, a download): NAME.p<pid>-<16 hex digits>.part beside
// final_path, a new name on every call, so two executions of one stage (a retry beside a worker
// presumed dead, a re-delivery) never write, truncate or commit the same file (issue #35 D6).
// Committed by commit_own_part; what a killed writer leaves is removed by remove_dead_temps (and
// by the next commit of the same output).
fs::path own_part_path(const fs::path& final_path);

// commit_part for a temporary named by own_part_path(final_path): `part` itself is fsynced,
// hashed and published once (the same guarantees), and removed on every error.  A `part` that is
// not a temporary of final_path (another folder, another name) is refused, path.escape.
Result<std::string> commit_own_part(const Root& root, const fs::path& final_path,
                                    const fs::path& part, std::string_view expected_sha256 = {},
                                    bool* reused = nullptr,
                                    const BeforePublish& before_publish = {});

// Removes the temporaries of final_path (NAME.p<pid>-<hex>.part and NAME.sha256.p<pid>-<hex>.part)
// whose writer is no longer a process here: a writer killed -9 mid-stream or mid-commit.  A live
// writer's stay (another thread or process of this host; our own pid).  A folder that does not
// exist yet has none.  Returns how many were removed; io.remove naming the file when one cannot
// be.
Result<std::size_t> remove_dead_temps(const Root& root, const fs::path& final_path);

// Output exists, sidecar exists, and the content hashes to the sidecar's value -> the hash.
// Errors: artifact.missing, artifact.no_sidecar, artifact.mismatch, path.* (a symlink at the
// file: never trusted as an output), io.*.
Result<std::string> verify(const fs::path& final_path);
Result<std::string> verify(const Root& root, const fs::path& final_path);

// Reads the sidecar without hashing the file (cheap existence check); empty if absent.
std::string read_sidecar(const fs::path& final_path);
std::string read_sidecar(const Root& root, const fs::path& final_path);

// Creates root/relative directories (mkdirs_beneath) for writers that stream a .part themselves;
// `dir` may be absolute below the root or relative to it.  The root itself is created if missing.
Status make_dirs(const Root& root, const fs::path& dir);

// Removes the *.part files below root that nothing has modified for at least `min_age` (crash
// garbage, rule 2); returns how many were removed.  A .part younger than that may belong to a live
// writer of another process sharing the root (the other pools of the host, the transfer
// receiver's resumable latents), so a restarting service never sweeps them; a stage that retries
// replaces its own stale .part by name anyway.
std::size_t sweep_parts(const fs::path& root, std::chrono::seconds min_age);

// fsync a file or directory by path.
Status fsync_path(const fs::path& p, bool directory);

}  // namespace h3pipe::artifacts

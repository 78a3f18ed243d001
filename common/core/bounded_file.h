#pragma once
// The one reader for files a user names by path (issue #22 item 4): the config (--config), a batch
// (run), a latent (latent inspect), a host map (config-adapt), a workflow or object_info file
// (comfyui split), a key or password file.  Such a path may name anything: /dev/zero, a FIFO
// nobody writes, a directory, a 2 GB sparse file.  Every caller goes through here, so none of
// them can block, allocate without bound or read forever:
//   - open(O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC): opening a FIFO returns at once, a
//     terminal never becomes the controlling one; symlinks are followed (a Kubernetes ConfigMap
//     or Secret is a symlink), what is checked is the file the descriptor opened;
//   - fstat on that descriptor: a regular file only (file.not_regular names what it is instead);
//   - its size against the kind's cap (file.too_large), and at most cap bytes read, so a file
//     that grows while being read is refused too.
// Messages name the file as the caller labels it, e.g.
//   "--config /dev/zero: not a regular file (a character device)"
//   "--config big.json: 2147483648 bytes, above the 16 MiB limit for a config"
// Thread-safe; no state.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/core/result.h"

namespace h3pipe {

inline constexpr std::uint64_t kMaxConfigFileBytes = 16ull << 20;
inline constexpr std::uint64_t kMaxJsonFileBytes = 64ull
                                                   << 20;  // host maps, workflows, object_info
inline constexpr std::uint64_t kMaxSmallFileBytes = 64ull << 10;  // keys, passwords

// What the file is for, and how large it may be.  The codes let a caller keep its own catalogue
// entries (batch.not_a_file, ...); the defaults are file.* and io.*.
struct FileKind {
  std::string_view name;  // "a config": "... above the 16 MiB limit for a config"
  std::uint64_t max_bytes;
  ErrorCode open_code = errc::io::kOpen;
  ErrorCode not_regular_code = errc::file::kNotRegular;
  ErrorCode too_large_code = errc::file::kTooLarge;
  std::string_view limit_from = {};  // where the cap comes from, e.g. "limits.max_batch"
};

// "a character device", "a FIFO", "a directory", ... for a st_mode.
std::string_view file_type_name(unsigned mode);

// "16 MiB", "64 KiB", "1000 bytes".
std::string format_byte_limit(std::uint64_t bytes);

// The whole content of `path` (a regular file of at most kind.max_bytes).  `label` names the file
// in messages; empty = the path.
Result<std::string> read_bounded_file(const std::filesystem::path& path, const FileKind& kind,
                                      std::string_view label = {});

}  // namespace h3pipe

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "common/artifacts/artifacts.h"
#include "common/transfer/sender.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
namespace {

// link(src, tmp) then rename(tmp, dst): dst appears complete or not at all.
Status link_over(const fs::path& src, const fs::path& dst) {
  fs::path tmp = dst;
  tmp += fmt::format(".link{}", std::random_device{}());
  if (::link(src.c_str(), tmp.c_str()) != 0) {
    int e = errno;
    return make_error(e == EXDEV ? errc::io::kExdev : errc::io::kLink, "link {} -> {}: {}",
                      src.string(), tmp.string(), std::strerror(e));
  }
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return make_error(errc::io::kRename, "rename {} -> {}: {}", tmp.string(), dst.string(),
                      std::strerror(e));
  }
  return {};
}

}  // namespace

Result<fs::path> local_handoff(const fs::path& src, const fs::path& dst, const fs::path& dst_root) {
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::equivalent(src, dst, ec)) return dst;
  const fs::path root = dst_root.empty() ? fs::path() : fs::absolute(dst_root, ec);
  const fs::path abs_dst = fs::absolute(dst, ec);
  if (!root.empty() && abs_dst.parent_path() != root) {
    H3_TRY(artifacts::make_dirs(artifacts::Root(root), abs_dst.parent_path()));
  } else {
    fs::create_directories(dst.parent_path(), ec);
    if (ec)
      return make_error(errc::io::kMkdir, "mkdir {}: {}", dst.parent_path().string(), ec.message());
  }
  Status s = link_over(src, dst);
  if (!s.ok() && s.error().code == errc::io::kExdev) {
    std::ifstream in(src, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    auto sha = root.empty() ? artifacts::write_atomic(dst, bytes)
                            : artifacts::write_atomic(artifacts::Root(root), abs_dst, bytes);
    if (!sha.ok()) return sha.error();
    if (*sha != artifacts::read_sidecar(src))
      return make_error(errc::artifact::kMismatch, "{}: copy hashes to {}, source sidecar says {}",
                        dst.string(), *sha, artifacts::read_sidecar(src));
    return dst;
  }
  H3_TRY(s);
  H3_TRY(link_over(artifacts::sidecar_path(src), artifacts::sidecar_path(dst)));
  H3_TRY(artifacts::fsync_path(dst.parent_path(), true));
  return dst;
}

}  // namespace h3pipe::transfer

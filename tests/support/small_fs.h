#pragma once
// A small tmpfs in a temp dir, for the read-only / full folder cases (mount(2) needs
// CAP_SYS_ADMIN: root in CI; H3_REQUIRE_SMALL_FS skips with the reason without it).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace h3pipe::test_support {

// A tmpfs of `bytes` in a temp dir, unmounted at the end.
class SmallFs {
 public:
  explicit SmallFs(std::size_t bytes) {
    const std::string opts = fmt::format("size={},mode=0755", bytes);
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) == 0)
      mounted_ = true;
    else
      why_ = std::strerror(errno);
  }
  ~SmallFs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::filesystem::path& path() const { return dir_.path(); }
  std::size_t free_bytes() const {
    struct statvfs v {};
    return ::statvfs(path().c_str(), &v) == 0 ? v.f_bavail * v.f_bsize : 0;
  }
  // Fills it up but `leave` bytes (whole pages: tmpfs counts pages).
  void fill(std::size_t leave) {
    struct statvfs v {};
    ASSERT_EQ(::statvfs(path().c_str(), &v), 0);
    const std::size_t free = v.f_bavail * v.f_bsize;
    ASSERT_GE(free, leave);
    std::ofstream(path() / "filler", std::ios::binary) << std::string(free - leave, 'x');
    ASSERT_EQ(::statvfs(path().c_str(), &v), 0);
    ASSERT_EQ(v.f_bavail * v.f_bsize, leave);
  }
  bool read_only() {
    return ::mount(nullptr, path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace h3pipe::test_support

#define H3_REQUIRE_SMALL_FS(fs_)                               \
  if (!(fs_).mounted())                                        \
  GTEST_SKIP() << "cannot mount a tmpfs here (" << (fs_).why() \
               << "): the read-only / full folder cases need root"

#pragma once
// A temporary directory removed with everything in it when the object goes away.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace h3pipe::test_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "h3pipe-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace h3pipe::test_support

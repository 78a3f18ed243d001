#include "common/artifacts/temporaries.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <random>
#include <vector>

namespace h3pipe::artifacts::temps {

std::string new_token() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("p{}-{:016x}", static_cast<long>(::getpid()), rng());
}

long writer_pid(std::string_view token) {
  if (token.size() < 3 || token[0] != 'p') return 0;
  long pid = 0;
  std::size_t i = 1;
  for (; i < token.size() && i < 12 && std::isdigit(static_cast<unsigned char>(token[i])); ++i)
    pid = pid * 10 + (token[i] - '0');
  return i > 1 && i < token.size() && token[i] == '-' ? pid : 0;
}

std::string_view token_of(std::string_view file, std::string_view name) {
  if (!file.starts_with(name) || !file.ends_with(".part")) return {};
  std::string_view rest = file.substr(name.size());
  rest.remove_suffix(5);
  if (rest.starts_with(".sha256."))
    rest.remove_prefix(8);
  else if (rest.starts_with("."))
    rest.remove_prefix(1);
  else
    return {};
  return writer_pid(rest) > 0 ? rest : std::string_view();
}

// A pid from another PID namespace that looks dead here may be a live writer's: it then loses
// its temporary, its commit fails (artifact.missing or an I/O error) and the retry finds NAME
// (never a wrong byte published).
std::size_t remove_dead_writers(int dir_fd, const std::string& name, std::string* failed,
                                int* failed_errno) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return 0;
  }
  const long self = static_cast<long>(::getpid());
  std::vector<std::string> dead;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n(e->d_name);
    const std::string_view token = token_of(n, name);
    if (token.empty()) continue;
    const long pid = writer_pid(token);
    if (pid != self && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      dead.emplace_back(n);
  }
  ::closedir(d);
  std::size_t removed = 0;
  for (const auto& n : dead) {
    if (::unlinkat(dir_fd, n.c_str(), 0) == 0) {
      ++removed;
    } else if (errno != ENOENT && failed && failed->empty()) {
      *failed = n;
      if (failed_errno) *failed_errno = errno;
    }
  }
  return removed;
}

}  // namespace h3pipe::artifacts::temps

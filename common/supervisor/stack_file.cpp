#include "common/supervisor/stack_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/core/json_parse.h"
#include "common/supervisor/state_dir.h"

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kMaxStackBytes = 1 << 20;

std::string read_small(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string s;
  std::getline(in, s, '\0');
  return s;
}

}  // namespace

fs::path stack_file(const fs::path& state_dir) {
  return state_dir / "stack.json";
}
fs::path lock_file(const fs::path& state_dir) {
  return state_dir / "supervisor.lock";
}

Result<std::optional<nlohmann::json>> read_stack(const fs::path& state_dir) {
  H3_TRY(check_state_dir(state_dir));
  const fs::path f = stack_file(state_dir);
  H3_TRY(check_in_state_dir(state_dir, f));
  H3_TRY(check_in_state_dir(state_dir, f.string() + ".sha256"));
  const int fd = ::open(f.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::optional<nlohmann::json>{};
  std::string text;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < kMaxStackBytes;)
    text.append(buf, n);
  ::close(fd);
  std::string why;
  auto j = json_reader::parse_limited(text, {kMaxStackBytes}, &why);
  if (!j || !j->is_object()) return std::optional<nlohmann::json>{};
  return j;
}

long long process_start_time(pid_t pid) {
  if (pid <= 0) return -1;
  const std::string stat = read_small(fmt::format("/proc/{}/stat", pid));
  // "PID (comm) S PPID ...": comm may hold spaces and parentheses; fields count from the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return -1;  // dead, not reaped yet
    if (i == 22) return std::atoll(field.c_str());
  }
  return -1;
}

bool same_process(pid_t pid, long long start_time) {
  return start_time >= 0 && process_start_time(pid) == start_time;
}

Proof prove_supervisor(const fs::path& state_dir, const nlohmann::json& stack) {
  const auto pid_it = stack.find("supervisor_pid");
  if (pid_it == stack.end() || !pid_it->is_number_integer() || pid_it->get<long long>() <= 0)
    return {false, "stack.json names no supervisor pid"};
  const pid_t pid = pid_it->get<pid_t>();
  const long long started = process_start_time(pid);
  if (started < 0) return {false, fmt::format("pid {} is not running", pid)};
  const auto t = stack.find("supervisor_start_time");
  if (t == stack.end() || !t->is_number_integer())
    return {false,
            fmt::format("pid {} is another process (stack.json records no start time)", pid)};
  if (t->get<long long>() != started)
    return {false,
            fmt::format("pid {} is another process (it started at tick {}, the supervisor at {})",
                        pid, started, t->get<long long>())};
  char exe_buf[4096];
  const ssize_t n =
      ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), exe_buf, sizeof exe_buf - 1);
  std::string exe = n > 0 ? std::string(exe_buf, n) : "";
  if (const auto d = exe.rfind(" (deleted)"); d != std::string::npos && d + 10 == exe.size())
    exe.resize(d);
  if (fs::path(exe).filename() != "h3pipe")
    return {false, fmt::format("pid {} is another process ({})", pid,
                               exe.empty() ? "its program is unknown" : exe)};
  std::string comm = read_small(fmt::format("/proc/{}/comm", pid));
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  if (comm != kSupervisorComm)
    return {false,
            fmt::format("pid {} is another process (an h3pipe named \"{}\", not the supervisor)",
                        pid, comm)};
  struct stat lock {};
  if (::stat(lock_file(state_dir).c_str(), &lock) != 0)
    return {false, fmt::format("pid {} is another process ({} is missing)", pid,
                               lock_file(state_dir).string())};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || st.st_dev != lock.st_dev || st.st_ino != lock.st_ino)
      continue;
    const std::string info =
        read_small(fmt::format("/proc/{}/fdinfo/{}", pid, e.path().filename().string()));
    if (info.find("FLOCK") != std::string::npos) return {true, ""};
  }
  return {false, fmt::format("pid {} is another process (it does not hold {})", pid,
                             lock_file(state_dir).string())};
}

}  // namespace h3pipe::supervisor

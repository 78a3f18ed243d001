#include "common/runtime/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

extern char** environ;

namespace h3pipe::runtime {
namespace {
using Clock = std::chrono::steady_clock;

// Owns a file descriptor.
class Fd final {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

class FileActions final {
 public:
  FileActions() { posix_spawn_file_actions_init(&fa_); }
  ~FileActions() { posix_spawn_file_actions_destroy(&fa_); }
  posix_spawn_file_actions_t* get() { return &fa_; }

 private:
  posix_spawn_file_actions_t fa_;
};

class SpawnAttr final {
 public:
  SpawnAttr() { posix_spawnattr_init(&a_); }
  ~SpawnAttr() { posix_spawnattr_destroy(&a_); }
  posix_spawnattr_t* get() { return &a_; }

 private:
  posix_spawnattr_t a_;
};

void keep_tail(std::string& buf, const char* data, std::size_t n, std::size_t cap) {
  buf.append(data, n);
  if (buf.size() > cap) buf.erase(0, buf.size() - cap);
}

// One stream's lines for SpawnOptions::on_line: the unfinished one, at most kMaxLineBytes kept.
struct Lines {
  const std::function<void(std::string_view)>* on_line = nullptr;
  std::string partial;
  void feed(const char* data, std::size_t n) {
    if (!on_line || !*on_line) return;
    for (std::size_t i = 0; i < n; ++i) {
      if (data[i] == '\n' || data[i] == '\r') {
        if (!partial.empty()) (*on_line)(partial);
        partial.clear();
      } else if (partial.size() < kMaxLineBytes) {
        partial.push_back(data[i]);
      }
    }
  }
};

// Reads what is available; returns false at EOF or on a hard error.
bool drain(int fd, std::string& buf, std::size_t cap, Lines& lines) {
  char chunk[8192];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      keep_tail(buf, chunk, static_cast<std::size_t>(n), cap);
      lines.feed(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

// Polls the pipes until `deadline` or until both are closed.
void pump(Fd& out, Fd& err, SpawnResult& r, std::size_t cap, Clock::time_point deadline,
          Lines (&lines)[2]) {
  while (out.get() >= 0 || err.get() >= 0) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p[2] = {{out.get(), POLLIN, 0}, {err.get(), POLLIN, 0}};
    int n = ::poll(p, 2, static_cast<int>(std::min<long long>(left, 50)));
    if (n < 0 && errno != EINTR) return;
    if (n <= 0) return;  // nothing within this slice: let the caller check the child
    if (p[0].revents && !drain(out.get(), r.stdout_tail, cap, lines[0])) out.reset();
    if (p[1].revents && !drain(err.get(), r.stderr_tail, cap, lines[1])) err.reset();
  }
}

// True once the child has terminated (not reaped: its pid, hence its group id, stays reserved).
bool exited(pid_t pid) {
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0)
    return errno == ECHILD;
  return si.si_pid == pid;
}

// Collects the exit status.  If something else in this process reaped the child first (a
// waitpid(-1) SIGCHLD handler), the status is unknown: reported as exit code -1, never as success.
void reap(pid_t pid, SpawnResult& r) {
  int status = 0;
  pid_t got;
  while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (got != pid)
    r.exit_code = -1;
  else if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.term_signal = WTERMSIG(status);
}

}  // namespace

std::vector<std::string> merged_environment(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv;
  }
  for (const auto& kv : overrides) env[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env) out.push_back(std::move(v));
  return out;
}

std::string tail_text(const std::string& s, std::size_t max_bytes) {
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.size() <= max_bytes) return t;
  std::size_t start = t.size() - max_bytes;
  auto nl = t.find('\n', start);
  if (nl != std::string::npos && nl + 1 < t.size()) start = nl + 1;
  return "..." + t.substr(start);
}

Result<SpawnResult> spawn_and_wait(const SpawnOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) return make_error(errc::exec::kSpawn, "empty command");
  int out_fds[2], err_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0)
    return make_error(errc::exec::kSpawn, "pipe: {}", std::strerror(errno));
  Fd out_r(out_fds[0]), out_w(out_fds[1]);
  if (::pipe2(err_fds, O_CLOEXEC) != 0)
    return make_error(errc::exec::kSpawn, "pipe: {}", std::strerror(errno));
  Fd err_r(err_fds[0]), err_w(err_fds[1]);

  FileActions fa;
  posix_spawn_file_actions_addopen(fa.get(), 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(fa.get(), out_w.get(), 1);
  posix_spawn_file_actions_adddup2(fa.get(), err_w.get(), 2);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(fa.get(), o.cwd.c_str());

  // Own process group (so a timeout kills the command and everything it started), an empty
  // signal mask and default dispositions: a service may block or ignore signals the command
  // must see (SIGPIPE, SIGTERM).
  SpawnAttr attr;
  posix_spawnattr_setflags(attr.get(),
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(attr.get(), 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(attr.get(), &none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM})
    sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(attr.get(), &defaults);

  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : o.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  auto start = Clock::now();
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, o.argv[0].c_str(), fa.get(), attr.get(), argv.data(), envp.data());
  if (rc != 0)
    return make_error(errc::exec::kSpawn, "cannot run \"{}\": {}", o.argv[0], std::strerror(rc));
  out_w.reset();
  err_w.reset();
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);

  SpawnResult r;
  Lines lines[2] = {{&o.on_line, {}}, {&o.on_line, {}}};
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(o.timeout_s));
  for (;;) {
    pump(out_r, err_r, r, o.tail_bytes,
         std::min(deadline, Clock::now() + std::chrono::milliseconds(50)), lines);
    if (exited(pid)) break;
    if (o.cancelled && o.cancelled())
      r.cancelled = true;
    else if (Clock::now() >= deadline)
      r.timed_out = true;
    if (r.cancelled || r.timed_out) {
      ::kill(-pid, SIGTERM);
      auto grace = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.kill_grace_s));
      while (!exited(pid) && Clock::now() < grace) {
        pump(out_r, err_r, r, o.tail_bytes, Clock::now() + std::chrono::milliseconds(20), lines);
        if (out_r.get() < 0 && err_r.get() < 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      break;
    }
    if (out_r.get() < 0 && err_r.get() < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The leader is gone (or being stopped): nothing it started may keep running or hold the pipes.
  ::kill(-pid, SIGKILL);
  reap(pid, r);
  pump(out_r, err_r, r, o.tail_bytes, Clock::now() + std::chrono::milliseconds(500), lines);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace h3pipe::runtime

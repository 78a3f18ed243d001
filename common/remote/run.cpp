// Running the host commands: posix_spawnp, no shell, stdin from /dev/null, stdout+stderr into one
// pipe per child, each child in its own process group so a timeout ends ssh and what it started.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "common/remote/remote.h"

extern char** environ;

namespace h3pipe::remote {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  std::size_t index = 0;
  pid_t pid = -1;
  int fd = -1;
  Clock::time_point started, deadline;
  bool term_sent = false;
  Clock::time_point kill_at;
};

// Starts one command; on failure fills the result and returns a Child with pid -1.
Child spawn(const HostCommand& cmd, std::size_t index, std::chrono::seconds timeout,
            HostResult& r) {
  Child ch;
  ch.index = index;
  ch.started = Clock::now();
  ch.deadline = ch.started + timeout;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    r.output = std::string("pipe: ") + std::strerror(errno);
    return ch;
  }
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);  // drain() reads what is there and returns
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&at, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  std::vector<char*> argv;
  for (const auto& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int rc = ::posix_spawnp(&ch.pid, argv[0], &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    ch.pid = -1;
    r.exit_code = 127;
    r.output =
        fmt::format("cannot run {}: {}\n", cmd.argv.empty() ? "" : cmd.argv[0], std::strerror(rc));
    return ch;
  }
  ch.fd = p[0];
  return ch;
}

void drain(Child& ch, HostResult& r) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(ch.fd, buf, sizeof buf);
    if (n > 0) {
      std::size_t room = kMaxOutput > r.output.size() ? kMaxOutput - r.output.size() : 0;
      r.output.append(buf, std::min<std::size_t>(room, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // EOF: every holder of the write end is gone
      ::close(ch.fd);
      ch.fd = -1;
    }
    return;
  }
}

}  // namespace

std::vector<HostResult> run_all(const std::vector<HostCommand>& cmds, std::chrono::seconds timeout,
                                int parallel) {
  std::vector<HostResult> results(cmds.size());
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    results[i].host = cmds[i].host;
    results[i].argv = cmds[i].argv;
  }
  std::map<int, std::vector<std::size_t>> waves;
  for (std::size_t i = 0; i < cmds.size(); ++i) waves[cmds[i].wave].push_back(i);

  for (auto& [wave, idx] : waves) {
    std::size_t next = 0;
    std::vector<Child> running;
    while (next < idx.size() || !running.empty()) {
      while (next < idx.size() && static_cast<int>(running.size()) < std::max(1, parallel)) {
        std::size_t i = idx[next++];
        Child ch = spawn(cmds[i], i, timeout, results[i]);
        if (ch.pid > 0) running.push_back(ch);
      }
      std::vector<pollfd> pfds;
      for (auto& ch : running)
        if (ch.fd >= 0) pfds.push_back({ch.fd, POLLIN, 0});
      if (!pfds.empty())
        ::poll(pfds.data(), pfds.size(), 50);
      else
        ::usleep(10000);  // children closed their output but have not exited yet
      auto now = Clock::now();
      for (auto it = running.begin(); it != running.end();) {
        Child& ch = *it;
        HostResult& r = results[ch.index];
        if (ch.fd >= 0) drain(ch, r);
        if (!ch.term_sent && now > ch.deadline) {
          ::kill(-ch.pid, SIGTERM);
          ch.term_sent = true;
          ch.kill_at = now + std::chrono::seconds(2);
          r.timed_out = true;
        } else if (ch.term_sent && now > ch.kill_at) {
          ::kill(-ch.pid, SIGKILL);
        }
        int st = 0;
        pid_t w = ::waitpid(ch.pid, &st, WNOHANG);
        if (w == ch.pid) {
          if (ch.fd >= 0) {
            drain(ch, r);  // what is left in the pipe
            if (ch.fd >= 0) ::close(ch.fd);
          }
          r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          r.seconds = std::chrono::duration<double>(Clock::now() - ch.started).count();
          it = running.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  return results;
}

}  // namespace h3pipe::remote

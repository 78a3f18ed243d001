// The receiver's durability order, seen from the kernel (label e2e): a real receiver process
// (bench/transfer/xfer_node) runs under strace while a real sender hands it a latent over
// loopback; its system calls must show the last pwrite of NAME.part, then an fdatasync of it,
// the sidecar renamed, NAME.part renamed to NAME, an fsync of the directory, and only then
// on_durable (xfer_node logs its "durable" event there).  Skipped when strace is absent or
// cannot trace /bin/true here; a receiver that dies under it fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/transfer/transfer_test_util.h"

namespace h3pipe::transfer {
namespace {
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::TempDir;
using testing::wait_until;

const std::string kNode = XFER_NODE;
const std::string kStrace = "/usr/bin/strace";

pid_t spawn(std::vector<std::string> args, const fs::path& out) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::fopen(out.c_str(), "a");
    if (f) {
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, std::chrono::milliseconds deadline) {
  int status = 0;
  if (!wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, deadline)) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string endpoint_of(const fs::path& log) {
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == "ready") return j.value("endpoint", "");
  }
  return "";
}

// strace -f output as one call per entry, in the order the calls returned: an "<unfinished ...>"
// line is joined with its "resumed>" line and placed where it resumed.
std::vector<std::string> calls(const fs::path& trace) {
  std::ifstream in(trace);
  std::map<std::string, std::string> pending;
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const std::string pid = line.substr(0, line.find(' '));
    if (auto u = line.find(" <unfinished ...>"); u != std::string::npos) {
      pending[pid] = line.substr(0, u);
    } else if (auto r = line.find(" resumed>"); r != std::string::npos && pending.count(pid)) {
      out.push_back(pending[pid] + line.substr(r + 9));
      pending.erase(pid);
    } else {
      out.push_back(line);
    }
  }
  return out;
}

bool ok_call(const std::string& c, const std::string& name) {
  const auto at = c.find_first_not_of(' ', c.find(' '));  // "PID  call(args) = 0"
  const auto end = c.find_last_not_of(' ');
  return at != std::string::npos && c.compare(at, name.size() + 1, name + "(") == 0 &&
         end != std::string::npos && end >= 3 && c.compare(end - 3, 4, " = 0") == 0;
}

TEST(ReceiverDurability, DataThenRenameThenDirectorySyncedBeforeTheHandOff) {
  if (!fs::exists(kStrace)) GTEST_SKIP() << kStrace << " not installed";
  if (!fs::exists(kNode)) GTEST_SKIP() << kNode << " not built";
  TempDir dir;
  // Can strace trace at all here (ptrace refused: a container without CAP_SYS_PTRACE, a seccomp
  // profile, Yama)?  Asked of /bin/true, so that a receiver that then crashes or exits at start
  // is a failure, never a skip.
  {
    const fs::path probe_out = dir.path() / "strace_probe.out";
    pid_t probe = spawn({kStrace, "-qq", "-o", "/dev/null", "/bin/true"}, probe_out);
    const int rc = wait_exit(probe, 30s);
    if (rc != 0) {
      std::ifstream in(probe_out);
      std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      GTEST_SKIP() << "strace cannot trace here (ptrace refused): strace /bin/true exited " << rc
                   << ": " << why.substr(0, 300);
    }
  }
  const fs::path keys = dir.path() / "keys", a = dir.path() / "A", b = dir.path() / "B";
  ASSERT_EQ(std::system((kNode + " keygen " + keys.string() + " >/dev/null").c_str()), 0);
  const std::string rel = "run1/job1/latent.h3latent";
  // 512x320, 49 frames: about 0.8 MB, several chunks and checkpoints.
  ASSERT_EQ(std::system((kNode + " mklatent " + (a / rel).string() +
                         " --width 512 --height 320 --frames 49 >/dev/null")
                            .c_str()),
            0);
  const fs::path trace = dir.path() / "recv.strace", rlog = dir.path() / "recv.jsonl";
  pid_t st = spawn({kStrace,  "-f",
                    "-qq",    "-y",
                    "-s",     "65536",
                    "-o",     trace.string(),
                    "-e",     "trace=pwrite64,fdatasync,fsync,rename,renameat,renameat2,write",
                    kNode,    "receive",
                    "--bind", "tcp://127.0.0.1:0",
                    "--root", b.string(),
                    "--keys", keys.string(),
                    "--log",  rlog.string()},
                   dir.path() / "recv.out");
  std::string ep;
  const bool ready = wait_until([&] { return !(ep = endpoint_of(rlog)).empty(); }, 30s);
  if (!ready) {
    const int rc = wait_exit(st, 1s);
    std::ifstream in(dir.path() / "recv.out");
    std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    FAIL() << "the traced receiver never became ready ("
           << (rc < 0 ? std::string("still running after 30 s") : "exit " + std::to_string(rc))
           << "; strace works here, so this is the receiver's failure): " << out.substr(0, 2000);
  }
  pid_t snd =
      spawn({kNode, "send", "--peer", "B=" + ep, "--root", a.string(), "--keys", keys.string(),
             "--log", (dir.path() / "send.jsonl").string(), "--task", rel, "--exit-after", "1"},
            dir.path() / "send.out");
  EXPECT_EQ(wait_exit(snd, 60s), 0) << "the sender did not finish";
  // Stop the traced receiver (strace's child) and let strace write out and exit.
  std::ifstream kids("/proc/" + std::to_string(st) + "/task/" + std::to_string(st) + "/children");
  pid_t node = 0;
  kids >> node;
  if (node > 0) ::kill(node, SIGTERM);
  if (wait_exit(st, 20s) < 0) {
    ::kill(st, SIGKILL);
    ::waitpid(st, nullptr, 0);
  }

  const std::string final_path = (b / rel).string(), part = final_path + ".part";
  const std::string dir_path = (b / "run1/job1").string();
  const auto cs = calls(trace);
  long last_pwrite = -1, sync_after = -1, sidecar_rename = -1, rename = -1, dir_sync = -1,
       durable = -1;
  for (long i = 0; i < static_cast<long>(cs.size()); ++i) {
    const std::string& c = cs[i];
    if (c.find(" pwrite64(") != std::string::npos && c.find("<" + part + ">") != std::string::npos)
      last_pwrite = i;
    else if (ok_call(c, "fdatasync") && c.find("<" + part + ">") != std::string::npos &&
             last_pwrite >= 0 && sync_after < last_pwrite)
      sync_after = i;
    else if ((ok_call(c, "rename") || ok_call(c, "renameat") || ok_call(c, "renameat2")) &&
             c.find("\"" + final_path + ".sha256\"") != std::string::npos)
      sidecar_rename = i;
    else if ((ok_call(c, "rename") || ok_call(c, "renameat") || ok_call(c, "renameat2")) &&
             c.find("\"" + part + "\"") != std::string::npos)
      rename = i;
    else if (ok_call(c, "fsync") && c.find("<" + dir_path + ">") != std::string::npos &&
             rename >= 0 && dir_sync < rename)
      dir_sync = i;
    else if (c.find(" write(") != std::string::npos && c.find("recv.jsonl>") != std::string::npos &&
             c.find("\\\"event\\\":\\\"durable\\\"") != std::string::npos && durable < 0)
      durable = i;
  }
  std::ostringstream dump;
  for (const auto& c : cs)
    if (c.find(dir_path) != std::string::npos || c.find("durable") != std::string::npos)
      dump << c.substr(0, 200) << "\n";
  ASSERT_GE(last_pwrite, 0) << dump.str();
  EXPECT_GT(sync_after, last_pwrite) << "NAME.part synced after its last write\n" << dump.str();
  EXPECT_GT(sidecar_rename, sync_after) << dump.str();
  EXPECT_GT(rename, sidecar_rename) << "the sidecar gets its name first\n" << dump.str();
  EXPECT_GT(dir_sync, rename) << "the directory synced after the renames\n" << dump.str();
  EXPECT_GT(durable, dir_sync) << "on_durable only once all of it is durable\n" << dump.str();
}

}  // namespace
}  // namespace h3pipe::transfer

#include "common/transfer/outbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "common/artifacts/safe_path.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;

namespace {

// A record's temporary is this execution's own (#35 D6, as the stage outputs'): a sampler and the
// transfer service may both record the same task at once, and a writer killed between its open
// and its rename must not leave a name the next one shares.
std::string own_temporary(const std::string& record_name) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}.p{}-{:016x}.part", record_name, ::getpid(), rng());
}

// The writer's pid of `file` when it is a temporary of `record_name` ("NAME.p<pid>-<16 hex>.part",
// or the older shared "NAME.part", pid 0), else -1.
long temporary_writer(std::string_view file, std::string_view record_name) {
  if (file.size() <= record_name.size() || file.substr(0, record_name.size()) != record_name)
    return -1;
  std::string_view rest = file.substr(record_name.size());
  if (rest == ".part") return 0;
  if (rest.substr(0, 2) != ".p" || rest.size() < 2 + 1 + 1 + 16 + 5 ||
      rest.substr(rest.size() - 5) != ".part")
    return -1;
  rest = rest.substr(2, rest.size() - 7);  // <pid>-<hex>
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || rest.size() - dash - 1 != 16) return -1;
  long pid = 0;
  for (char c : rest.substr(0, dash)) {
    if (c < '0' || c > '9' || pid > 1'000'000'000) return -1;
    pid = pid * 10 + (c - '0');
  }
  for (char c : rest.substr(dash + 1))
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return -1;
  return pid > 0 ? pid : -1;
}

bool process_exists(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::size_t remove_dead_temporaries(int dir_fd, std::string_view only_record,
                                    std::chrono::seconds min_age) {
  const int fd = ::dup(dir_fd);
  if (fd < 0) return 0;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return 0;
  }
  ::rewinddir(d);
  std::vector<std::string> doomed;
  const auto now = std::chrono::system_clock::now();
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.size() < 6 || name.substr(name.size() - 5) != ".part") continue;
    // The record this temporary belongs to: "<job>.task" before ".p<pid>-<hex>.part" / ".part".
    const auto task = name.rfind(".task.");
    if (task == std::string_view::npos) continue;
    const std::string_view record = name.substr(0, task + 5);
    if (!only_record.empty() && record != only_record) continue;
    const long pid = temporary_writer(name, record);
    if (pid < 0) continue;
    struct stat st;
    if (::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    // Its writer gone, and untouched for min_age: a record's write takes milliseconds, and a
    // writer in another pid namespace (a sampler's container) may look gone from here.
    const auto mtime = std::chrono::system_clock::time_point(
        std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec));
    if (process_exists(pid) ||
        now - std::chrono::time_point_cast<std::chrono::system_clock::duration>(mtime) < min_age)
      continue;
    doomed.emplace_back(name);
  }
  ::closedir(d);
  std::size_t removed = 0;
  for (const auto& n : doomed)
    if (::unlinkat(dir_fd, n.c_str(), 0) == 0) ++removed;
  return removed;
}

fs::path record_path(const fs::path& outbox, const pb::StageTask& task) {
  return outbox / task.run_id() / (task.job_id() + ".task");
}

Status record_task(const fs::path& outbox, const pb::StageTask& task) {
  H3_TRY(artifacts::validate_id("task.run_id", task.run_id()));
  H3_TRY(artifacts::validate_id("task.job_id", task.job_id()));
  const fs::path final_path = record_path(outbox, task);
  const std::string record_name = final_path.filename().string();
  const fs::path part = final_path.parent_path() / own_temporary(record_name);
  // OUTBOX/RUN is made and opened below the outbox without following a symlink; the record is
  // written, renamed and synced by name in that folder (path.* errors for a planted symlink).
  std::error_code ec;
  fs::create_directories(outbox, ec);  // the configured outbox itself is trusted
  if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", outbox.string(), ec.message());
  auto dir = artifacts::open_dir_beneath(outbox, task.run_id(), true);
  if (!dir.ok()) return dir.error();
  // What a killed writer of this record left (its pid gone) goes before this one writes.
  (void)remove_dead_temporaries(dir->get(), record_name, kDeadTemporaryAge);
  const std::string part_name = part.filename().string(), final_name = record_name;
  std::string bytes;
  task.SerializeToString(&bytes);
  int fd = ::openat(dir->get(), part_name.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return make_error(errc::io::kOpen, "open {}: {}", part.string(), std::strerror(errno));
  bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlinkat(dir->get(), part_name.c_str(), 0);
    return make_error(errc::io::kWrite, "write {}: {}", part.string(), std::strerror(err));
  }
  if (::renameat(dir->get(), part_name.c_str(), dir->get(), final_name.c_str()) != 0) {
    err = errno;
    ::unlinkat(dir->get(), part_name.c_str(), 0);
    return make_error(errc::io::kRename, "rename {}: {}", part.string(), std::strerror(err));
  }
  if (::fsync(dir->get()) != 0)
    return make_error(errc::io::kFsync, "fsync {}: {}", final_path.parent_path().string(),
                      std::strerror(errno));
  return {};
}

std::vector<pb::StageTask> scan_outbox(const fs::path& outbox, std::vector<Error>* problems) {
  std::vector<pb::StageTask> out;
  std::error_code ec;
  if (outbox.empty() || !fs::is_directory(outbox, ec)) return out;
  for (const auto& run : fs::directory_iterator(outbox, ec)) {
    if (!run.is_directory(ec)) continue;
    // Temporaries of killed writers (#35 D6) go with each scan (the sender's, every rescan_ms).
    if (auto dir = artifacts::open_dir_beneath(outbox, run.path().filename(), false); dir.ok())
      (void)remove_dead_temporaries(dir->get(), {}, kDeadTemporaryAge);
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(run.path(), ec))
      if (f.is_regular_file(ec) && f.path().extension() == ".task") files.push_back(f.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      pb::StageTask t;
      if (!t.ParseFromString(ss.str()) || t.run_id() != run.path().filename().string() ||
          t.job_id() + ".task" != f.filename().string()) {
        if (problems)
          problems->push_back(make_error(errc::transfer::kOutbox,
                                         "{}: not a task record for its path", f.string()));
        continue;
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

void remove_record(const fs::path& outbox, const pb::StageTask& task) {
  if (outbox.empty()) return;
  std::error_code ec;
  fs::remove(record_path(outbox, task), ec);
}

void fail_record(const fs::path& outbox, const pb::StageTask& task, const std::string& reason) {
  if (outbox.empty()) return;
  fs::path p = record_path(outbox, task);
  fs::path failed = p;
  failed += ".failed";
  std::error_code ec;
  if (!fs::exists(p, ec)) return;
  (void)artifacts::write_atomic(artifacts::Root(fs::absolute(outbox, ec)),
                                fs::absolute(fs::path(failed.string() + ".txt"), ec),
                                reason + "\n");
  fs::rename(p, failed, ec);
}

Status notify_latent_ready(zmq::context_t& ctx, const std::string& endpoint,
                           const pb::StageTask& task, const fs::path& outbox, int timeout_ms) {
  if (!outbox.empty()) H3_TRY(record_task(outbox, task));
  if (endpoint.empty()) return {};
  std::string bytes;
  task.SerializeToString(&bytes);
  try {
    zmq::socket_t s(ctx, zmq::socket_type::push);
    s.set(zmq::sockopt::linger, timeout_ms);
    s.set(zmq::sockopt::sndtimeo, timeout_ms);
    s.set(zmq::sockopt::sndhwm, 16);
    s.connect(endpoint);
    if (!s.send(zmq::buffer(bytes), zmq::send_flags::none))
      return make_error(errc::transfer::kNotify,
                        "notify {}: timed out after {} ms (the outbox record remains)", endpoint,
                        timeout_ms);
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kNotify, "notify {}: {}", endpoint, e.what());
  }
  return {};
}

Status notify_latent_ready(const std::string& endpoint, const pb::StageTask& task,
                           const fs::path& outbox, int timeout_ms) {
  zmq::context_t ctx(1);
  return notify_latent_ready(ctx, endpoint, task, outbox, timeout_ms);
}

}  // namespace h3pipe::transfer

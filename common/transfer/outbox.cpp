#include "common/transfer/outbox.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/artifacts/artifacts.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;

fs::path record_path(const fs::path& outbox, const pb::StageTask& task) {
  return outbox / task.run_id() / (task.job_id() + ".task");
}

Status record_task(const fs::path& outbox, const pb::StageTask& task) {
  H3_TRY(artifacts::validate_id("task.run_id", task.run_id()));
  H3_TRY(artifacts::validate_id("task.job_id", task.job_id()));
  const fs::path final_path = record_path(outbox, task);
  const fs::path part = artifacts::part_path(final_path);
  // OUTBOX/RUN is made and opened below the outbox without following a symlink; the record is
  // written, renamed and synced by name in that folder (path.* errors for a planted symlink).
  std::error_code ec;
  fs::create_directories(outbox, ec);  // the configured outbox itself is trusted
  if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", outbox.string(), ec.message());
  auto dir = artifacts::open_dir_beneath(outbox, task.run_id(), true);
  if (!dir.ok()) return dir.error();
  const std::string part_name = part.filename().string(),
                    final_name = final_path.filename().string();
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
  if (!ok) return make_error(errc::io::kWrite, "write {}: {}", part.string(), std::strerror(err));
  if (::renameat(dir->get(), part_name.c_str(), dir->get(), final_name.c_str()) != 0)
    return make_error(errc::io::kRename, "rename {}: {}", part.string(), std::strerror(errno));
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

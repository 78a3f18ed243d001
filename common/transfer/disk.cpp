#include "common/transfer/disk.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/artifacts/artifacts.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kSlot = 128;
constexpr char kMagic[8] = {'H', '3', 'X', 'F', 'E', 'R', '0', '1'};

// The message names the failed call: "fsync /spool/x: No space left on device".
Error sys_error(const ErrorCode& call, const fs::path& p) {
  return make_error(call, "{} {}: {}", call.leaf(), p.string(), std::strerror(errno));
}

void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// Checksum of a slot's payload: the first 8 bytes of its SHA-256.
void slot_sum(const std::uint8_t* slot, std::uint8_t* out) {
  Sha256 h;
  h.update(slot, 104);
  std::string hex = h.hex_digest();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
}

std::optional<ResumeState> parse_slot(const std::uint8_t* s) {
  if (std::memcmp(s, kMagic, 8) != 0) return std::nullopt;
  std::uint8_t sum[8];
  slot_sum(s, sum);
  if (std::memcmp(sum, s + 104, 8) != 0) return std::nullopt;
  ResumeState st;
  st.seq = get64(s + 8);
  st.size = get64(s + 16);
  st.durable = get64(s + 24);
  std::uint64_t flags = get64(s + 32);
  st.complete = flags & 1;
  st.notified = flags & 2;
  st.sha256.assign(reinterpret_cast<const char*>(s + 40), 64);
  if (st.durable > st.size) return std::nullopt;
  return st;
}

Status pwrite_all(int fd, const void* data, std::size_t len, std::uint64_t off, const fs::path& p) {
  const auto* d = static_cast<const std::uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::pwrite(fd, d, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(errc::io::kWrite, p);
    d += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::size_t>(n);
  }
  return {};
}

Status write_slot(int fd, const fs::path& p, const ResumeState& st) {
  std::uint8_t slot[kSlot] = {};
  std::memcpy(slot, kMagic, 8);
  put64(slot + 8, st.seq);
  put64(slot + 16, st.size);
  put64(slot + 24, st.durable);
  put64(slot + 32, (st.complete ? 1u : 0u) | (st.notified ? 2u : 0u));
  std::memcpy(slot + 40, st.sha256.data(), std::min<std::size_t>(64, st.sha256.size()));
  slot_sum(slot, slot + 104);
  return pwrite_all(fd, slot, kSlot, (st.seq % 2) * kSlot, p);
}

}  // namespace

std::optional<ResumeState> read_state(const fs::path& state_path) {
  int fd = ::open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::uint8_t buf[2 * kSlot] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  std::optional<ResumeState> best;
  for (int i = 0; i < 2; ++i) {
    if (n < static_cast<ssize_t>((i + 1) * kSlot)) break;
    auto s = parse_slot(buf + i * kSlot);
    if (s && (!best || s->seq > best->seq)) best = s;
  }
  return best;
}

PartFile::Paths PartFile::paths_for(const fs::path& final_path) {
  Paths p;
  p.final_path = final_path;
  p.part = artifacts::part_path(final_path);
  p.state = final_path;
  p.state += ".xfer";
  p.sidecar = artifacts::sidecar_path(final_path);
  p.sidecar_part = artifacts::part_path(p.sidecar);
  p.dir = final_path.parent_path();
  return p;
}

PartFile::PartFile(Paths p, std::uint64_t size, std::string sha256)
    : paths_(std::move(p)), size_(size), sha256_(std::move(sha256)) {}

PartFile::~PartFile() {
  if (fd_ >= 0) ::close(fd_);
  if (state_fd_ >= 0) ::close(state_fd_);
}

Result<std::shared_ptr<PartFile>> PartFile::open(const fs::path& final_path, std::uint64_t size,
                                                 const std::string& sha256, Sha256* hasher,
                                                 std::uint64_t* have, bool allow_resume,
                                                 const fs::path& root) {
  std::shared_ptr<PartFile> f(new PartFile(paths_for(final_path), size, sha256));
  const Paths& p = f->paths_;
  std::error_code ec;
  if (!root.empty() && p.dir != root) {
    H3_TRY(artifacts::make_dirs(artifacts::Root(fs::absolute(root)), fs::absolute(p.dir)));
  } else {
    fs::create_directories(p.dir, ec);
    if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", p.dir.string(), ec.message());
  }

  auto st = read_state(p.state);
  std::uint64_t part_size = fs::exists(p.part, ec) ? fs::file_size(p.part, ec) : 0;
  bool resume = allow_resume && st && !st->complete && st->size == size && st->sha256 == sha256 &&
                part_size >= st->durable && st->durable > 0;
  f->fd_ = ::open(p.part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (f->fd_ < 0) return sys_error(errc::io::kOpen, p.part);
  f->state_fd_ = ::open(p.state.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (f->state_fd_ < 0) return sys_error(errc::io::kOpen, p.state);
  f->seq_ = st ? st->seq : 0;
  *have = resume ? st->durable : 0;
  // Bytes past the durable prefix may be torn after a power loss: drop them.
  if (::ftruncate(f->fd_, static_cast<off_t>(*have)) != 0)
    return sys_error(errc::io::kTruncate, p.part);
  if (resume) {
    std::vector<std::uint8_t> buf(1 << 20);
    for (std::uint64_t at = 0; at < *have;) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), *have - at));
      ssize_t r = ::pread(f->fd_, buf.data(), n, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return sys_error(errc::io::kRead, p.part);
      hasher->update(buf.data(), static_cast<std::size_t>(r));
      at += static_cast<std::uint64_t>(r);
    }
  } else {
    H3_TRY(f->write_state(0, false, false));
  }
  std::string line = sha256 + "  " + p.final_path.filename().string() + "\n";
  int sfd =
      ::open(p.sidecar_part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (sfd < 0) return sys_error(errc::io::kOpen, p.sidecar_part);
  Status s = pwrite_all(sfd, line.data(), line.size(), 0, p.sidecar_part);
  ::close(sfd);
  H3_TRY(s);
  return f;
}

Status PartFile::write(std::uint64_t offset, const void* data, std::size_t len) {
  return pwrite_all(fd_, data, len, offset, paths_.part);
}

void PartFile::start_writeback(std::uint64_t offset, std::uint64_t len) {
  ::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(len),
                    SYNC_FILE_RANGE_WRITE);
}

Status PartFile::write_state(std::uint64_t durable, bool complete, bool sync) {
  ResumeState st{size_, sha256_, durable, complete, false, ++seq_};
  H3_TRY(write_slot(state_fd_, paths_.state, st));
  if (sync && ::fdatasync(state_fd_) != 0) return sys_error(errc::io::kFsync, paths_.state);
  return {};
}

Status PartFile::prepare() {
  if (prepared_) return {};
  int sfd = ::open(paths_.sidecar_part.c_str(), O_RDONLY | O_CLOEXEC);
  if (sfd < 0) return sys_error(errc::io::kOpen, paths_.sidecar_part);
  int rc = ::fdatasync(sfd);
  ::close(sfd);
  if (rc != 0) return sys_error(errc::io::kFsync, paths_.sidecar_part);
  H3_TRY(artifacts::fsync_path(paths_.dir, true));  // the .part, .xfer and sidecar entries
  prepared_ = true;
  return {};
}

Status PartFile::checkpoint(std::uint64_t offset) {
  if (::fdatasync(fd_) != 0) return sys_error(errc::io::kFsync, paths_.part);
  // The state is written after the data it describes is on disk, so whatever version of it
  // survives a power loss claims no more than is durable; it needs no sync of its own.
  return write_state(offset, false, false);
}

Status PartFile::commit() {
  if (::fdatasync(fd_) != 0) return sys_error(errc::io::kFsync, paths_.part);
  H3_TRY(prepare());
  // Sidecar first: a final name never exists without the sidecar that vouches for it, so a kill
  // between the two renames leaves a missing latent (re-offered), never an unverifiable one.
  if (::rename(paths_.sidecar_part.c_str(), paths_.sidecar.c_str()) != 0)
    return sys_error(errc::io::kRename, paths_.sidecar_part);
  if (::rename(paths_.part.c_str(), paths_.final_path.c_str()) != 0)
    return sys_error(errc::io::kRename, paths_.part);
  H3_TRY(write_state(size_, true, false));
  return artifacts::fsync_path(paths_.dir, true);
}

void PartFile::discard() {
  discard_paths(paths_.final_path);
}

void PartFile::discard_paths(const fs::path& final_path) {
  const Paths p = paths_for(final_path);
  ::unlink(p.part.c_str());
  ::unlink(p.state.c_str());
  ::unlink(p.sidecar_part.c_str());
}

int PartFile::remove_leftovers(const fs::path& final_path) {
  const Paths p = paths_for(final_path);
  int n = 0;
  for (const fs::path* f : {&p.part, &p.sidecar_part})
    if (::unlink(f->c_str()) == 0) ++n;
  return n;
}

void PartFile::mark_notified(const fs::path& final_path, const std::string& sha256,
                             std::uint64_t size) {
  Paths p = paths_for(final_path);
  auto st = read_state(p.state);
  int fd = ::open(p.state.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return;
  ResumeState next{size, sha256, size, true, true, (st ? st->seq : 0) + 1};
  (void)write_slot(fd, p.state, next);
  ::close(fd);
}

IoThread::IoThread() : efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  thread_ = std::thread([this] { loop(); });
}

IoThread::~IoThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ::close(efd_);
}

void IoThread::post(Job job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back(std::move(job));
    ++outstanding_;
  }
  cv_.notify_one();
}

std::size_t IoThread::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return outstanding_;
}

void IoThread::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and nothing left: queued jobs always run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Completion c = job();
    {
      std::lock_guard<std::mutex> l(mu_);
      done_.push_back(std::move(c));
    }
    std::uint64_t one = 1;
    (void)!::write(efd_, &one, sizeof one);
  }
}

void IoThread::drain() {
  std::uint64_t v;
  (void)!::read(efd_, &v, sizeof v);
  std::deque<Completion> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    ready.swap(done_);
    outstanding_ -= ready.size();
  }
  for (auto& c : ready)
    if (c) c();
}

}  // namespace h3pipe::transfer

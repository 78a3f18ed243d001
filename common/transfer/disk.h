#pragma once
// The receiver's files for one incoming latent, all beside its final name:
//   NAME.part          data being received (kept across restarts for resume)
//   NAME.xfer          resume state: two checksummed 128-byte slots written alternately, so a
//                      torn write leaves the previous one (size, sha256, durable prefix, phase)
//   NAME.sha256.part   the sidecar, prepared at the offer and renamed at commit
// and the I/O thread that does every blocking sync off the receive loop.
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/core/result.h"
#include "common/core/sha256.h"

namespace h3pipe::transfer {

struct ResumeState {
  std::uint64_t size = 0;
  std::string sha256;
  std::uint64_t durable = 0;  // bytes of NAME.part known to be on stable storage
  bool complete = false;      // NAME committed
  bool notified = false;      // on_durable returned OK for it
  std::uint64_t seq = 0;
};

// Newest valid slot, or nullopt (missing, torn, foreign).
std::optional<ResumeState> read_state(const std::filesystem::path& state_path);

class PartFile final {
 public:
  struct Paths {
    std::filesystem::path final_path, part, state, sidecar, sidecar_part, dir;
  };
  static Paths paths_for(const std::filesystem::path& final_path);

  // Opens NAME.part for an offer of (size, sha256).  With `resume`, continues from the persisted
  // durable prefix when the state matches the offer and the .part holds it (re-hashing that
  // prefix into `hasher`); otherwise starts empty.  Runs on the I/O thread.  `root` (the
  // receiver's configured root; empty = the final path's folder) is where the folders are made
  // without following a symlink: a symlink planted below it fails the open (path.symlink) before
  // anything is created; the files themselves are opened O_NOFOLLOW.
  static Result<std::shared_ptr<PartFile>> open(const std::filesystem::path& final_path,
                                                std::uint64_t size, const std::string& sha256,
                                                Sha256* hasher, std::uint64_t* have,
                                                bool resume = true,
                                                const std::filesystem::path& root = {});
  ~PartFile();
  PartFile(const PartFile&) = delete;
  PartFile& operator=(const PartFile&) = delete;

  const Paths& paths() const { return paths_; }
  Status write(std::uint64_t offset, const void* data, std::size_t len);  // receive loop
  // Starts asynchronous write-back of a range so that the final sync has little left to do.
  void start_writeback(std::uint64_t offset, std::uint64_t len);
  // fdatasync of the prepared sidecar and fsync of the directory, once, early in the transfer
  // so that commit() finds them done (I/O thread).
  Status prepare();
  // fdatasync(.part), then record durable = offset (I/O thread).
  Status checkpoint(std::uint64_t offset);
  // fdatasync(.part), rename .part -> NAME and the sidecar, fsync(dir) (I/O thread).
  Status commit();
  // Removes .part, state and the prepared sidecar (integrity failure).
  void discard();
  // The same by name, for an attempt whose file was never opened here (or is being opened).
  static void discard_paths(const std::filesystem::path& final_path);
  // A latent found complete (final name and sidecar verified): an attempt's NAME.part and
  // NAME.sha256.part still beside it are a killed attempt's (this receiver is their only writer,
  // and the latent's session is closed), so they go; the state file stays (it remembers the
  // hand-off).  Returns how many files went.
  static int remove_leftovers(const std::filesystem::path& final_path);
  // Records that on_durable succeeded (no sync: a lost mark only repeats an idempotent enqueue).
  static void mark_notified(const std::filesystem::path& final_path, const std::string& sha256,
                            std::uint64_t size);

 private:
  PartFile(Paths p, std::uint64_t size, std::string sha256);
  Status write_state(std::uint64_t durable, bool complete, bool sync);

  Paths paths_;
  std::uint64_t size_;
  std::string sha256_;
  int fd_ = -1;
  int state_fd_ = -1;
  std::uint64_t seq_ = 0;
  bool prepared_ = false;
};

// One thread for blocking disk work.  A job runs there and returns a completion that the owner
// thread runs from drain(); event_fd() becomes readable when completions wait (zmq_poll on it).
class IoThread final {
 public:
  using Completion = std::function<void()>;
  using Job = std::function<Completion()>;
  IoThread();
  ~IoThread();
  void post(Job job);
  int event_fd() const { return efd_; }
  void drain();  // owner thread
  std::size_t pending() const;

 private:
  void loop();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::deque<Completion> done_;
  std::size_t outstanding_ = 0;
  bool stop_ = false;
  int efd_ = -1;
  std::thread thread_;
};

}  // namespace h3pipe::transfer

#include "common/api/events_hub.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/api/context.h"
#include "common/queue/streams.h"

namespace h3pipe::api {
namespace {
using Clock = std::chrono::steady_clock;
using Id = std::pair<std::uint64_t, std::uint64_t>;
using Text = std::shared_ptr<const std::string>;

constexpr int kReadCount = 1000;  // entries per stream per XREAD / XRANGE
constexpr int kBlockMs = 100;     // a new stream is followed within this

constexpr char kHead[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    "X-Accel-Buffering: no\r\nConnection: close\r\n\r\nretry: 1000\n\n";

std::string id_text(const Id& id) {
  return std::to_string(id.first) + "-" + std::to_string(id.second);
}

struct Frame {
  Id id;
  Text text;
};

// One SSE event per stream entry: id = the entry id, event = its type, data = its fields.
Frame frame(const queue::StreamEntry& e) {
  nlohmann::json data = nlohmann::json::object();
  std::string type = "message";
  for (const auto& [k, v] : e.fields) {
    data[k] = v;
    if (k == "type" && !v.empty() && v.find_first_of("\r\n") == std::string::npos) type = v;
  }
  auto text = std::make_shared<std::string>("id: " + e.id + "\nevent: " + type +
                                            "\ndata: " + data.dump() + "\n\n");
  return {queue::parse_stream_id(e.id).value_or(Id{}), std::move(text)};
}

struct Join {
  std::uint64_t sub;
  int fd;
  std::string stream;
  Id after;
};

// What the reader hands the writer, in order: a subscriber to attach (with what it missed), or
// a stream's new entries.
struct Msg {
  std::uint64_t sub = 0;  // 0: a broadcast of `stream`
  int fd = -1;
  std::string stream;
  Id last{};
  std::vector<Frame> frames;
};

struct Sub {
  int fd;
  std::string stream;
  Id last;
  std::deque<Text> out;
  std::size_t off = 0, pending = 0;
  // Bytes of its replay not yet written: allowed on top of kMaxBuffered (a reconnect after a long
  // absence is not dropped for what it missed, only for falling behind the live events).
  std::size_t allowance = 0;
  Clock::time_point last_write;
  bool want_out = false;
};

}  // namespace

struct EventsHub::Impl {
  explicit Impl(Context& c) : ctx(c) {
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev);
    reader = std::thread([this] { read_loop(); });
    writer = std::thread([this] { write_loop(); });
  }
  ~Impl() {
    stop = true;
    cv.notify_all();
    poke();
    reader.join();
    writer.join();
    for (auto& j : joins) gone(j.fd);
    for (auto& m : inbox)
      if (m.sub) gone(m.fd);
    ::close(ep);
    ::close(wake);
  }

  Context& ctx;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> n_clients{0};

  // The reader's input: subscribers to join, and how many follow each stream.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Join> joins;
  std::map<std::string, int> refs;
  std::uint64_t next_sub = 1;

  // The writer's input.
  std::mutex wmu;
  std::deque<Msg> inbox;
  int ep = -1, wake = -1;
  std::thread reader, writer;

  // A subscriber's socket closed (h3pipe_api_sse_clients counts the open ones).
  void gone(int fd) {
    ::close(fd);
    ctx.metrics.sse_closed();
  }

  void poke() {
    const std::uint64_t one = 1;
    (void)!::write(wake, &one, sizeof one);
  }
  void post(Msg m) {
    {
      std::lock_guard lk(wmu);
      inbox.push_back(std::move(m));
    }
    poke();
  }

  // ---- reader ------------------------------------------------------------------------------
  void read_loop() {
    std::optional<Context::Lease> conn;
    std::map<std::string, std::pair<Id, std::string>> cursor;  // followed stream -> last id
    std::vector<Join> waiting;                                 // joins not yet attached
    while (!stop) {
      {
        std::unique_lock lk(mu);
        if (joins.empty() && waiting.empty() && refs.empty())
          cv.wait_for(lk, std::chrono::seconds(1), [&] { return stop || !joins.empty(); });
        for (auto& j : joins) waiting.push_back(std::move(j));
        joins.clear();
        for (auto it = cursor.begin(); it != cursor.end();)
          it = refs.count(it->first) ? std::next(it) : cursor.erase(it);
      }
      if (stop) break;
      if (!conn) {
        auto l = ctx.lease();
        if (!l.ok()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
          continue;
        }
        conn.emplace(std::move(*l));
      }
      queue::Redis& r = *conn->r;
      bool failed = false;
      while (!waiting.empty() && !failed) {
        Join& j = waiting.front();
        Msg m{j.sub, j.fd, j.stream, j.after, {}};
        auto it = cursor.find(j.stream);
        if (it == cursor.end() || j.after < it->second.first) {
          // What it missed, by XRANGE: up to the stream's cursor, or (a stream no one followed)
          // to its end, where the next XREAD then starts.
          const bool fresh = it == cursor.end();
          std::string from = id_text(j.after);
          for (;;) {
            auto got =
                queue::xrange_after(r, j.stream, from, fresh ? "+" : it->second.second, kReadCount);
            if (!got.ok()) {
              failed = true;
              break;
            }
            for (const auto& e : *got) m.frames.push_back(frame(e));
            if (static_cast<int>(got->size()) < kReadCount) break;
            from = got->back().id;
          }
          if (failed) break;
          if (fresh)
            cursor[j.stream] = m.frames.empty()
                                   ? std::pair{j.after, id_text(j.after)}
                                   : std::pair{m.frames.back().id, id_text(m.frames.back().id)};
        }
        post(std::move(m));
        waiting.erase(waiting.begin());
      }
      if (!failed && !cursor.empty()) {
        std::vector<std::pair<std::string, std::string>> keys;
        for (const auto& [s, c] : cursor) keys.emplace_back(s, c.second);
        auto got = queue::xread(r, keys, kReadCount, kBlockMs);
        if (!got.ok()) {
          failed = true;
        } else {
          for (auto& [stream, entries] : *got) {
            if (entries.empty()) continue;
            Msg m{0, -1, stream, {}, {}};
            for (const auto& e : entries) m.frames.push_back(frame(e));
            cursor[stream] = {m.frames.back().id, entries.back().id};
            post(std::move(m));
          }
        }
      }
      if (failed) {
        conn.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
    for (auto& j : waiting) gone(j.fd);
  }

  // ---- writer ------------------------------------------------------------------------------
  std::unordered_map<std::uint64_t, Sub> subs;
  std::unordered_map<std::string, std::vector<std::uint64_t>> by_stream;

  void drop(std::uint64_t id) {
    auto it = subs.find(id);
    if (it == subs.end()) return;
    ::epoll_ctl(ep, EPOLL_CTL_DEL, it->second.fd, nullptr);
    ::shutdown(it->second.fd, SHUT_RDWR);
    gone(it->second.fd);
    auto& v = by_stream[it->second.stream];
    std::erase(v, id);
    if (v.empty()) by_stream.erase(it->second.stream);
    {
      std::lock_guard lk(mu);
      if (--refs[it->second.stream] <= 0) refs.erase(it->second.stream);
    }
    subs.erase(it);
    --n_clients;
  }

  void interest(std::uint64_t id, Sub& s, bool out) {
    if (s.want_out == out) return;
    s.want_out = out;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0);
    ev.data.u64 = id;
    ::epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
  }

  // Writes what it can without blocking; false: the subscriber is gone (dropped).
  bool flush(std::uint64_t id, Sub& s) {
    while (!s.out.empty()) {
      iovec iov[64];
      int n = 0;
      for (auto it = s.out.begin(); it != s.out.end() && n < 64; ++it, ++n) {
        const std::size_t skip = n == 0 ? s.off : 0;
        iov[n] = {const_cast<char*>((*it)->data()) + skip, (*it)->size() - skip};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<std::size_t>(n);
      const ssize_t w = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          interest(id, s, true);
          return true;
        }
        drop(id);
        return false;
      }
      s.last_write = Clock::now();
      std::size_t left = static_cast<std::size_t>(w);
      s.pending -= left;
      s.allowance -= std::min(s.allowance, left);
      while (left > 0) {
        const std::size_t here = s.out.front()->size() - s.off;
        if (left < here) {
          s.off += left;
          left = 0;
        } else {
          left -= here;
          s.off = 0;
          s.out.pop_front();
        }
      }
    }
    interest(id, s, false);
    return true;
  }

  // Queues a text; false: over the bound, the subscriber was dropped (it reconnects).
  bool queue_text(std::uint64_t id, Sub& s, Text t) {
    s.pending += t->size();
    s.out.push_back(std::move(t));
    if (s.pending <= kMaxBuffered + s.allowance) return true;
    // Over the bound: what the socket takes now first (a burst to a reader that keeps up).
    if (!flush(id, s)) return false;
    if (s.pending <= kMaxBuffered + s.allowance) return true;
    drop(id);
    return false;
  }

  void deliver(Msg& m) {
    if (m.sub) {
      Sub s{m.fd, m.stream, m.last, {}, 0, 0, 0, Clock::now(), false};
      for (const auto& f : m.frames) s.allowance += f.text->size();
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = m.sub;
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, m.fd, &ev) != 0) {
        gone(m.fd);
        std::lock_guard lk(mu);
        if (--refs[m.stream] <= 0) refs.erase(m.stream);
        --n_clients;
        return;
      }
      auto& sub = subs.emplace(m.sub, std::move(s)).first->second;
      by_stream[m.stream].push_back(m.sub);
      for (auto& f : m.frames)
        if (f.id > sub.last) {
          sub.last = f.id;
          if (!queue_text(m.sub, sub, f.text)) return;
        }
      flush(m.sub, sub);
      return;
    }
    auto it = by_stream.find(m.stream);
    if (it == by_stream.end()) return;
    const std::vector<std::uint64_t> ids = it->second;  // drop() edits the list
    for (std::uint64_t id : ids) {
      auto s = subs.find(id);
      if (s == subs.end()) continue;
      bool ok = true;
      for (auto& f : m.frames)
        if (f.id > s->second.last) {
          s->second.last = f.id;
          if (!(ok = queue_text(id, s->second, f.text))) break;
        }
      if (ok) flush(id, s->second);
    }
  }

  void write_loop() {
    static const Text kBeat = std::make_shared<const std::string>(": keep-alive\n\n");
    std::vector<epoll_event> evs(256);
    Clock::time_point next_beat = Clock::now() + std::chrono::seconds(1);
    while (!stop) {
      const int n = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 1000);
      for (int i = 0; i < n; ++i) {
        const std::uint64_t id = evs[i].data.u64;
        if (id == 0) {
          std::uint64_t v;
          (void)!::read(wake, &v, sizeof v);
          continue;
        }
        auto it = subs.find(id);
        if (it == subs.end()) continue;
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          // A subscriber sends nothing after its request: data is dropped, EOF ends it.
          char buf[512];
          const ssize_t r = ::recv(it->second.fd, buf, sizeof buf, MSG_DONTWAIT);
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
              (evs[i].events & (EPOLLHUP | EPOLLERR))) {
            drop(id);
            continue;
          }
        }
        if (evs[i].events & EPOLLOUT) flush(id, it->second);
      }
      std::deque<Msg> got;
      {
        std::lock_guard lk(wmu);
        got.swap(inbox);
      }
      for (auto& m : got) deliver(m);
      const auto now = Clock::now();
      if (now >= next_beat) {
        next_beat = now + std::chrono::seconds(1);
        std::vector<std::uint64_t> idle;
        for (auto& [id, s] : subs)
          if (s.out.empty() && now - s.last_write >= kHeartbeat) idle.push_back(id);
        for (std::uint64_t id : idle) {
          auto it = subs.find(id);
          if (it != subs.end() && queue_text(id, it->second, kBeat)) flush(id, it->second);
        }
      }
    }
    std::vector<std::uint64_t> all;
    for (auto& [id, _] : subs) all.push_back(id);
    for (std::uint64_t id : all) drop(id);
  }
};

EventsHub::EventsHub(Context& ctx) : impl_(std::make_unique<Impl>(ctx)) {}
EventsHub::~EventsHub() = default;

void EventsHub::add(int fd, const std::string& stream, const std::string& after) {
  // The head goes out now (a fresh socket's buffer holds it), so the client sees the stream
  // open at once; events follow once the reader has attached it (within kBlockMs).
  if (::send(fd, kHead, sizeof kHead - 1, MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(sizeof kHead - 1)) {
    ::close(fd);
    return;
  }
  impl_->ctx.metrics.sse_opened();
  const Id a = queue::parse_stream_id(after).value_or(Id{});
  {
    std::lock_guard lk(impl_->mu);
    impl_->joins.push_back({impl_->next_sub++, fd, stream, a});
    ++impl_->refs[stream];
    ++impl_->n_clients;
  }
  impl_->cv.notify_all();
}

std::size_t EventsHub::clients() const {
  return impl_->n_clients.load();
}

}  // namespace h3pipe::api

#pragma once
// Starts FakeComfyUiServer (tests/runtime/fake_comfyui_server.py, Python standard library;
// faithful to a real ComfyUI 0.3.64, see tests/runtime/comfyui_fake_conformance_test.py; its
// websocket progress and preview frames follow a recorded real exchange,
// comfyui_fake_ws_conformance_test.py) on a free port for one test and stops it afterwards;
// restart() replaces it by a fresh process on the same port.  The comfyui runtime talks to it
// through its production client code.  Used by tests/runtime and tests/e2e.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/media/media.h"
#include "tests/support/runtime_test_util.h"

extern char** environ;

namespace h3pipe::runtime::testing {

// A real MP4 (H.264 + AAC; without audio: H.264 alone, by the ffmpeg command) of width x height
// x frames at fps, grey frames and silence: what SaveVideo stand-ins hand back.
inline void write_test_mp4(const fs::path& path, int width, int height, int frames,
                           bool audio = true, int fps = 24) {
  if (!audio) {
    const std::string cmd =
        "ffmpeg -v error -y -f lavfi -i color=c=gray:s=" + std::to_string(width) + "x" +
        std::to_string(height) + ":r=" + std::to_string(fps) + " -frames:v " +
        std::to_string(frames) + " -c:v libx264 -pix_fmt yuv420p " + path.string();
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("ffmpeg failed: " + cmd);
    return;
  }
  const media::AudioParams ap = media::fast_audio_params();
  auto w = media::Mp4Writer::open(path, media::fast_video_params(width, height, fps), ap);
  if (!w.ok()) throw std::runtime_error(w.error().to_string());
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * height * 3, 128);
  for (int i = 0; i < frames; ++i)
    if (auto st = (*w)->add_frame(rgb); !st.ok()) throw std::runtime_error(st.error().to_string());
  if (audio) {
    std::vector<float> silence(static_cast<std::size_t>(ap.sample_rate) * frames / fps * 2, 0.f);
    if (auto st = (*w)->add_audio(silence); !st.ok())
      throw std::runtime_error(st.error().to_string());
  }
  if (auto st = (*w)->finish(); !st.ok()) throw std::runtime_error(st.error().to_string());
}

class FakeComfyUiServer final {
 public:
  struct Options {
    std::string mode = "ok";  // ok | fail | forget
    int exec_delay_ms = 0;
    fs::path latent;        // written by the latent save nodes (unless they save a loaded one)
    fs::path conditioning;  // written by H3SaveConditioning
    fs::path mp4;           // written by SaveVideo (default: small_spec()'s 64x64x9 with audio)
    std::string packs;      // "seeds": the seeds' custom node classes exist too
    long long max_upload_bytes = 0;   // 0: ComfyUI's default, 100 MB
    std::vector<std::string> models;  // files to create under models/, e.g. "vae/v.safetensors"
    // Node modules executed for real (--exec-python-nodes): "h3pipe_nodes,h3_standins" runs
    // h3pipe's node pack and the weight-free stand-ins of a core MiniMax H3 workflow.
    std::string exec_python_nodes;
    // As the server's --preview-method: "latent2rgb" sends a binary preview frame per sampler step
    // the way a real 0.3.64 does (fake_comfyui_ws.py); "" or "none" (its default) sends none.
    std::string preview_method;
    long long preview_huge_bytes = 0;   // one extra frame of this size at step 1
    bool ignore_feature_flags = false;  // as a server before them: type 1 frames only
  };

  FakeComfyUiServer(const fs::path& root, const Options& o)
      : root_(root), record_(root / "record.jsonl"), options_(o) {
    fs::create_directories(root_);
    for (const auto& m : o.models) {
      fs::create_directories((root_ / "models" / m).parent_path());
      write_text(root_ / "models" / m, "");
    }
    // The decode stage checks the movie against the job (stage_output.h): by default the fake
    // "decodes" every job to small_spec()'s geometry.
    if (options_.mp4.empty()) {
      options_.mp4 = root_ / "default.mp4";
      const auto s = small_spec();
      write_test_mp4(options_.mp4, static_cast<int>(s.width()), static_cast<int>(s.height()),
                     static_cast<int>(s.frames()));
    }
    if (!options_.preview_method.empty() && options_.preview_method != "none")
      write_preview_jpeg(root_ / "preview.jpg");
    start(0);
  }
  ~FakeComfyUiServer() { stop(); }
  FakeComfyUiServer(const FakeComfyUiServer&) = delete;
  FakeComfyUiServer& operator=(const FakeComfyUiServer&) = delete;

  // Stops the process and starts a new one on the same port after `down`: what a ComfyUI restart
  // looks like to a client (refused connections, then a server with an empty queue and history).
  void restart(std::chrono::milliseconds down) {
    stop();
    std::this_thread::sleep_for(down);
    start(port_);
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const fs::path& root() const { return root_; }
  fs::path input_dir() const { return root_ / "input"; }
  fs::path output_dir() const { return root_ / "output"; }

  // Request bodies the server received, by kind: prompt, queue, history, interrupt, upload,
  // too_large, feature_flags (a websocket client's first message).  Prompts rejected with 400 are
  // listed too (status in recorded_status).
  std::vector<nlohmann::json> recorded(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& j : lines())
      if (j["kind"] == kind) out.push_back(j["body"]);
    return out;
  }
  std::vector<int> recorded_status(const std::string& kind) const {
    std::vector<int> out;
    for (const auto& j : lines())
      if (j["kind"] == kind) out.push_back(j.value("status", 0));
    return out;
  }

 private:
  // What a real server's latent2rgb preview is: a 512x512 JPEG of quality 95 (PIL), 42-68 KB in
  // the recording; here ffmpeg's test pattern with a little noise at -q:v 2: 44 KB, decodable.
  // The same picture as comfyui_fake_ws_conformance_test.py's.
  static void write_preview_jpeg(const fs::path& path) {
    const std::string cmd =
        "ffmpeg -v error -y -f lavfi -i testsrc2=s=512x512,noise=alls=4 -frames:v 1 -q:v 2 " +
        path.string();
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("ffmpeg failed: " + cmd);
  }

  std::vector<nlohmann::json> lines() const {
    std::vector<nlohmann::json> out;
    std::error_code ec;
    if (!fs::exists(record_, ec)) return out;
    std::istringstream in(read_text(record_));
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
    return out;
  }

  void start(int port) {
    const Options& o = options_;
    std::vector<std::string> args = {
        "/usr/bin/python3", H3PIPE_SOURCE_DIR "/tests/runtime/fake_comfyui_server.py",
        "--root",           root_.string(),
        "--port",           std::to_string(port),
        "--mode",           o.mode,
        "--exec-delay-ms",  std::to_string(o.exec_delay_ms),
        "--record",         record_.string()};
    if (!o.latent.empty()) args.insert(args.end(), {"--latent", o.latent.string()});
    if (!o.conditioning.empty())
      args.insert(args.end(), {"--conditioning", o.conditioning.string()});
    if (!o.mp4.empty()) args.insert(args.end(), {"--mp4", o.mp4.string()});
    if (!o.packs.empty()) args.insert(args.end(), {"--packs", o.packs});
    if (!o.exec_python_nodes.empty())
      args.insert(args.end(), {"--exec-python-nodes", o.exec_python_nodes});
    if (!o.preview_method.empty())
      args.insert(args.end(), {"--preview-method", o.preview_method, "--preview-jpeg",
                               (root_ / "preview.jpg").string()});
    if (o.ignore_feature_flags) args.push_back("--ignore-feature-flags");
    if (o.preview_huge_bytes > 0)
      args.insert(args.end(), {"--preview-huge-bytes", std::to_string(o.preview_huge_bytes)});
    if (o.max_upload_bytes > 0)
      args.insert(args.end(), {"--max-upload-bytes", std::to_string(o.max_upload_bytes)});
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      throw std::runtime_error("cannot start the fake ComfyUI server");
    }
    // Wait (with a deadline) for "PORT <n>".
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    if (line.rfind("PORT ", 0) != 0) {
      stop();
      throw std::runtime_error("the fake ComfyUI server did not report its port: " + line);
    }
    port_ = std::stoi(line.substr(5));
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  fs::path root_, record_;
  Options options_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A cluster config for a comfyui runtime under test: one pool, the job classes given, and the
// input roots reference images may come from.
class ComfyCluster final {
 public:
  ComfyCluster(config::StageKind stage, std::vector<fs::path> input_roots,
               std::vector<std::string> classes = {}) {
    config::Pool p;
    p.name = "pool-a";
    p.host = "local";
    p.stage = stage;
    cluster_.pools.push_back(p);
    cluster_.limits.input_roots = std::move(input_roots);
    for (auto& c : classes) {
      config::JobClass jc;
      jc.name = c;
      cluster_.classes.push_back(jc);
    }
  }
  FactoryArgs args(const nlohmann::json& settings) const {
    FactoryArgs a;
    a.cluster = &cluster_;
    a.pool = &cluster_.pools[0];
    a.settings = &settings;
    return a;
  }
  const config::Cluster& cluster() const { return cluster_; }

 private:
  config::Cluster cluster_;
};

// A port nothing listens on: bound, read back and closed.
inline int closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

}  // namespace h3pipe::runtime::testing

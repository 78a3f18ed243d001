#include "common/comfyui/install_nodes.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/core/sha256.h"

namespace h3pipe::comfyui {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPackName = "h3pipe_nodes";
// Written into every copy install-nodes makes: each file it put there with its SHA-256, so a
// later run recognises its own pack by content and never removes anything else (issue #35 D7:
// any h3pipe_nodes folder with an __init__.py was deleted, foreign files and all).
constexpr const char* kMarker = ".h3pipe-pack.json";

bool is_checkout(const fs::path& d) {
  std::error_code ec;
  return fs::is_regular_file(d / "main.py", ec) && fs::is_regular_file(d / "nodes.py", ec);
}

// What ComfyUI keeps under its base directory (folder_paths.py: base_path/custom_nodes, models,
// input, output, user).
bool is_base_dir(const fs::path& d) {
  std::error_code ec;
  for (const char* sub : {"custom_nodes", "models", "input", "output", "user"})
    if (fs::is_directory(d / sub, ec)) return true;
  return false;
}

std::string loaded_by(const fs::path& dir, bool checkout) {
  const fs::path custom = dir / "custom_nodes";
  if (checkout)
    return fmt::format(
        "a ComfyUI started from this checkout without --base-directory loads {}; one started "
        "with --base-directory B loads only B/custom_nodes (run install-nodes B for it)",
        custom.string());
  return fmt::format("a ComfyUI started with --base-directory {} loads {} (and not its checkout's)",
                     dir.string(), custom.string());
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The files of a pack, relative, without caches.
std::vector<fs::path> pack_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    auto rel = fs::relative(it->path(), root, ec);
    if (rel.begin() != rel.end() &&
        (rel.begin()->string() == "__pycache__" || rel.filename() == "__pycache__")) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (rel == kMarker) continue;
    if (it->is_regular_file()) out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool same_tree(const fs::path& a, const fs::path& b) {
  auto fa = pack_files(a), fb = pack_files(b);
  if (fa != fb) return false;
  for (const auto& f : fa)
    if (read_all(a / f) != read_all(b / f)) return false;
  return true;
}

Status copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec)
    return make_error(errc::comfyui::kInstallIo, "cannot create {}: {}", to.string(), ec.message());
  for (const auto& f : pack_files(from)) {
    fs::create_directories((to / f).parent_path(), ec);
    fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return make_error(errc::comfyui::kInstallIo, "cannot copy {}: {}", (from / f).string(),
                        ec.message());
  }
  return Status::Ok();
}

// The marker for a copy of `files` under `root`.
std::string marker_text(const fs::path& root, const std::vector<fs::path>& files) {
  nlohmann::ordered_json m = {{"h3pipe_node_pack", 1}, {"files", nlohmann::ordered_json::object()}};
  for (const auto& f : files) m["files"][f.generic_string()] = sha256_hex(read_all(root / f));
  return m.dump(1) + "\n";
}

Status write_marker(const fs::path& dest, const fs::path& from) {
  std::ofstream out(dest / kMarker, std::ios::binary | std::ios::trunc);
  out << marker_text(from, pack_files(from));
  out.close();
  if (!out)
    return make_error(errc::comfyui::kInstallIo, "cannot write {}", (dest / kMarker).string());
  return Status::Ok();
}

// Empty when `dest` (a real folder) is a pack install-nodes wrote and nobody has added to or
// edited since; else why not, naming what would be lost.  Files it wrote that are gone since, and
// Python's __pycache__, do not count.
std::string not_ours(const fs::path& dest) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(dest / kMarker, ec)))
    return fmt::format("it has no {} (install-nodes writes one into every copy it makes)", kMarker);
  auto text = read_bounded_file(dest / kMarker, {"the pack's marker", kMaxSmallFileBytes});
  if (!text.ok()) return text.error().message;
  auto m = json_reader::parse_json(*text, (dest / kMarker).string(), errc::comfyui::kInstallExists);
  if (!m.ok()) return m.error().message;
  if (!m->is_object() || !m->contains("files") || !(*m)["files"].is_object())
    return fmt::format("{} does not list the files of the pack", (dest / kMarker).string());
  const auto& listed = (*m)["files"];
  std::vector<std::string> foreign;
  for (auto it = fs::recursive_directory_iterator(dest, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path rel = fs::relative(it->path(), dest, ec);
    if (rel.begin()->string() == "__pycache__" || rel.filename() == "__pycache__") {
      if (it->is_directory(ec) && !it->is_symlink(ec)) it.disable_recursion_pending();
      continue;
    }
    if (rel == kMarker) continue;
    const auto st = it->symlink_status(ec);
    if (fs::is_directory(st)) continue;
    const std::string name = rel.generic_string();
    if (!fs::is_regular_file(st))
      foreign.push_back(name + " (not a file it wrote)");
    else if (!listed.contains(name))
      foreign.push_back(name + " (not one it wrote)");
    else if (!listed[name].is_string() ||
             listed[name].get<std::string>() != sha256_hex(read_all(it->path())))
      foreign.push_back(name + " (changed since)");
  }
  if (ec) return fmt::format("cannot list {}: {}", dest.string(), ec.message());
  if (foreign.empty()) return {};
  std::string list;
  for (std::size_t i = 0; i < foreign.size() && i < 5; ++i) list += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 5) list += fmt::format(" and {} more", foreign.size() - 5);
  return "it holds what install-nodes did not put there: " + list;
}

// Renames `dest` to <custom_nodes>/h3pipe_nodes.<UTC time>.disabled (ComfyUI skips a folder whose
// name ends in .disabled), so nothing in it is lost.
Result<fs::path> move_aside(const fs::path& dest) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::error_code ec;
  for (int n = 0; n < 100; ++n) {
    const fs::path to =
        dest.parent_path() / fmt::format("{}.{:04}{:02}{:02}T{:02}{:02}{:02}Z{}.disabled",
                                         kPackName, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                                         tm.tm_hour, tm.tm_min, tm.tm_sec,
                                         n ? fmt::format("-{}", n) : std::string());
    if (fs::exists(fs::symlink_status(to, ec))) continue;
    fs::rename(dest, to, ec);
    if (ec)
      return make_error(errc::comfyui::kInstallIo, "cannot move {} aside to {}: {}", dest.string(),
                        to.string(), ec.message());
    return to;
  }
  return make_error(errc::comfyui::kInstallIo, "cannot find a free name to move {} aside",
                    dest.string());
}

}  // namespace

fs::path default_pack_dir(const fs::path& bin_dir) {
  if (const char* e = std::getenv("H3PIPE_COMFYUI_NODES"); e && *e) return e;
  for (const auto& c : {bin_dir / ".." / "share" / "h3pipe" / "comfyui" / kPackName,
                        bin_dir / ".." / ".." / "integrations" / "comfyui" / kPackName,
                        bin_dir / ".." / "integrations" / "comfyui" / kPackName}) {
    std::error_code ec;
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c, ec);
  }
  return fs::path("integrations") / "comfyui" / kPackName;
}

Result<InstallResult> install_nodes(const InstallOptions& o) {
  std::error_code ec;
  const bool checkout = is_checkout(o.comfyui_dir);
  if (!checkout && !is_base_dir(o.comfyui_dir))
    return make_error(errc::comfyui::kInstallNotComfyui,
                      "{} is neither a ComfyUI checkout (main.py and nodes.py) nor a ComfyUI base "
                      "directory (--base-directory: custom_nodes/, models/, input/, output/ or "
                      "user/ in it)",
                      o.comfyui_dir.string());
  if (!fs::is_regular_file(o.pack_dir / "__init__.py", ec))
    return make_error(errc::comfyui::kInstallNoPack,
                      "the node pack is not at {} (no __init__.py); set H3PIPE_COMFYUI_NODES or "
                      "pass --from DIR",
                      o.pack_dir.string());
  fs::path src = fs::canonical(o.pack_dir, ec);
  fs::path custom = o.comfyui_dir / "custom_nodes";
  fs::create_directories(custom, ec);
  if (ec)
    return make_error(errc::comfyui::kInstallIo, "cannot create {}: {}", custom.string(),
                      ec.message());
  InstallResult r;
  r.dest = custom / kPackName;
  r.checkout = checkout;
  r.loaded_by = loaded_by(o.comfyui_dir, checkout);
  auto st = fs::symlink_status(r.dest, ec);
  bool exists = !ec && fs::exists(st);
  if (exists && fs::is_symlink(st)) {
    fs::path target = fs::canonical(r.dest, ec);
    if (!ec && target == src && o.symlink) {
      r.action = "unchanged";
      return r;
    }
    if (!o.force && !(ec == std::errc() && target == src))
      return make_error(errc::comfyui::kInstallExists,
                        "{} is a symlink to {}; pass --force to replace it", r.dest.string(),
                        fs::read_symlink(r.dest, ec).string());
    fs::remove(r.dest, ec);
    exists = false;
  } else if (exists) {
    if (!fs::is_directory(st))
      return make_error(errc::comfyui::kInstallExists, "{} exists and is not a folder",
                        r.dest.string());
    if (!o.symlink && same_tree(src, r.dest)) {
      // The pack as it is (an older install may lack the marker: it is ours by content).
      if (!fs::exists(r.dest / kMarker, ec)) (void)write_marker(r.dest, src);
      r.action = "unchanged";
      return r;
    }
    // Only a pack install-nodes wrote, unchanged since, is replaced; anything else is refused,
    // or with --force moved aside, never deleted.
    if (const std::string why = not_ours(r.dest); !why.empty()) {
      if (!o.force)
        return make_error(errc::comfyui::kInstallExists,
                          "{} is not a node pack install-nodes wrote: {}; pass --force to move it "
                          "aside to {}.<time>.disabled (nothing in it is deleted)",
                          r.dest.string(), why, (custom / kPackName).string());
      auto aside = move_aside(r.dest);
      if (!aside.ok()) return aside.error();
      r.moved_aside = *aside;
      exists = false;
    }
  }
  if (o.symlink) {
    if (exists) fs::remove_all(r.dest, ec);
    fs::create_directory_symlink(src, r.dest, ec);
    if (ec)
      return make_error(errc::comfyui::kInstallIo, "cannot link {}: {}", r.dest.string(),
                        ec.message());
    r.action = "linked";
    return r;
  }
  // Copy next to it, then swap, so ComfyUI never loads half a pack.
  fs::path tmp = custom / fmt::format(".{}.tmp-{}", kPackName, ::getpid());
  fs::remove_all(tmp, ec);
  H3_TRY(copy_tree(src, tmp));
  H3_TRY(write_marker(tmp, tmp));
  if (exists) fs::remove_all(r.dest, ec);
  fs::rename(tmp, r.dest, ec);
  if (ec) {
    fs::remove_all(tmp, ec);
    return make_error(errc::comfyui::kInstallIo, "cannot move the copy into {}: {}",
                      r.dest.string(), ec.message());
  }
  r.action = exists ? "updated" : "copied";
  return r;
}

}  // namespace h3pipe::comfyui

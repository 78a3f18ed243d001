#include "common/comfyui/install_nodes.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

namespace h3pipe::comfyui {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPackName = "h3pipe_nodes";

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
      r.action = "unchanged";
      return r;
    }
    if (!fs::is_regular_file(r.dest / "__init__.py", ec) && !o.force)
      return make_error(errc::comfyui::kInstallExists,
                        "{} exists and does not look like h3pipe's node pack; pass --force to "
                        "replace it",
                        r.dest.string());
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

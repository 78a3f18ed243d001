// `h3pipe comfyui install-nodes`: refuses what is not a ComfyUI folder, copies or links the pack,
// and a second run changes nothing.
#include "common/comfyui/install_nodes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace h3pipe::comfyui;

namespace {

struct Tmp {
  fs::path dir = fs::temp_directory_path() / ("h3install_" + std::to_string(::getpid()));
  Tmp() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Tmp() { fs::remove_all(dir); }
};

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << s;
}

TEST(InstallNodes, CopiesLinksAndIsIdempotent) {
  Tmp t;
  fs::path pack = t.dir / "pack" / "h3pipe_nodes";
  write(pack / "__init__.py", "NODE_CLASS_MAPPINGS = {}\n");
  write(pack / "nodes.py", "# nodes\n");
  write(pack / "__pycache__" / "nodes.cpython-311.pyc", "junk");
  fs::path comfy = t.dir / "ComfyUI";
  write(comfy / "main.py", "");
  write(comfy / "nodes.py", "");

  // Not a ComfyUI folder.
  auto bad = install_nodes({t.dir / "pack", pack});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "comfyui.install.not_comfyui");
  EXPECT_FALSE(fs::exists(t.dir / "pack" / "custom_nodes"));

  auto r = install_nodes({comfy, pack});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->action, "copied");
  EXPECT_TRUE(fs::is_regular_file(comfy / "custom_nodes/h3pipe_nodes/__init__.py"));
  EXPECT_FALSE(fs::exists(comfy / "custom_nodes/h3pipe_nodes/__pycache__"));
  auto again = install_nodes({comfy, pack});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->action, "unchanged");
  write(pack / "nodes.py", "# nodes v2\n");
  auto upd = install_nodes({comfy, pack});
  ASSERT_TRUE(upd.ok());
  EXPECT_EQ(upd->action, "updated");

  // A symlinked install over the copy, then idempotent too.
  auto ln = install_nodes({comfy, pack, true, false});
  ASSERT_TRUE(ln.ok()) << ln.error().message;
  EXPECT_EQ(ln->action, "linked");
  EXPECT_TRUE(fs::is_symlink(comfy / "custom_nodes/h3pipe_nodes"));
  EXPECT_EQ(install_nodes({comfy, pack, true, false})->action, "unchanged");

  // Something else under that name is not replaced without --force.
  fs::remove(comfy / "custom_nodes/h3pipe_nodes");
  write(comfy / "custom_nodes/h3pipe_nodes/README", "someone else's");
  auto other = install_nodes({comfy, pack});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, "comfyui.install.exists");
  EXPECT_TRUE(install_nodes({comfy, pack, false, true}).ok());
}

}  // namespace

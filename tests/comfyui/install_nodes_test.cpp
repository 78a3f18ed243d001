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

// ComfyUI loads custom nodes from <base>/custom_nodes only, <base> being --base-directory when
// given (folder_paths.py): a base directory is accepted as it is (no custom_nodes/ yet), and the
// result says which server loads the pack from where.
TEST(InstallNodes, ABaseDirectoryIsAcceptedAndTheResultSaysWhichComfyUIReadsIt) {
  Tmp t;
  fs::path pack = t.dir / "pack" / "h3pipe_nodes";
  write(pack / "__init__.py", "NODE_CLASS_MAPPINGS = {}\n");
  fs::path base = t.dir / "comfy-base";
  fs::create_directories(base / "input");
  fs::create_directories(base / "output");
  fs::create_directories(base / "models");

  auto r = install_nodes({base, pack});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->dest, base / "custom_nodes" / "h3pipe_nodes");
  EXPECT_TRUE(fs::is_regular_file(base / "custom_nodes/h3pipe_nodes/__init__.py"));
  EXPECT_FALSE(r->checkout);
  EXPECT_EQ(r->loaded_by, "a ComfyUI started with --base-directory " + base.string() + " loads " +
                              (base / "custom_nodes").string() + " (and not its checkout's)");

  fs::path checkout = t.dir / "ComfyUI";
  write(checkout / "main.py", "");
  write(checkout / "nodes.py", "");
  auto c = install_nodes({checkout, pack});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->checkout);
  EXPECT_NE(
      c->loaded_by.find("without --base-directory loads " + (checkout / "custom_nodes").string()),
      std::string::npos)
      << c->loaded_by;
  EXPECT_NE(c->loaded_by.find("with --base-directory B loads only B/custom_nodes"),
            std::string::npos)
      << c->loaded_by;

  // A folder that is neither is still refused, naming both kinds.
  fs::create_directories(t.dir / "empty");
  auto bad = install_nodes({t.dir / "empty", pack});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "comfyui.install.not_comfyui");
  EXPECT_NE(bad.error().message.find("nor a ComfyUI base directory"), std::string::npos)
      << bad.error().message;
}

}  // namespace

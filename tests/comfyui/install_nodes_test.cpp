// `h3pipe comfyui install-nodes`: refuses what is not a ComfyUI folder, copies or links the pack,
// and a second run changes nothing.
#include "common/comfyui/install_nodes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace h3pipe::comfyui;

namespace {

struct Tmp {
  h3pipe::test_support::TempDir tmp{"h3install"};
  fs::path dir = tmp.path();
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

// install-nodes recognises its own pack by content (issue #35 D7): it once deleted any
// h3pipe_nodes folder with an __init__.py, foreign files and all.  Now only a copy it wrote and
// nobody changed is replaced; anything else is refused, and with --force moved aside to
// h3pipe_nodes.<time>.disabled with every file in it.
TEST(InstallNodes, NeverDeletesAFolderItDidNotWrite) {
  Tmp t;
  fs::path pack = t.dir / "pack" / "h3pipe_nodes";
  write(pack / "__init__.py", "NODE_CLASS_MAPPINGS = {}\n");
  write(pack / "nodes.py", "# nodes\n");
  fs::path comfy = t.dir / "ComfyUI";
  write(comfy / "main.py", "");
  write(comfy / "nodes.py", "");
  const fs::path dest = comfy / "custom_nodes" / "h3pipe_nodes";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };

  // Someone else's pack that happens to be called h3pipe_nodes, with an __init__.py.
  write(dest / "__init__.py", "# another project\n");
  write(dest / "precious.safetensors", "weights");
  for (bool symlink : {false, true}) {
    auto r = install_nodes({comfy, pack, symlink, false});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, "comfyui.install.exists");
    EXPECT_NE(r.error().message.find("has no .h3pipe-pack.json"), std::string::npos)
        << r.error().message;
    EXPECT_EQ(read(dest / "precious.safetensors"), "weights");
  }
  // --force moves it aside whole; the pack goes in its place.
  auto forced = install_nodes({comfy, pack, false, true});
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  ASSERT_FALSE(forced->moved_aside.empty());
  EXPECT_EQ(forced->moved_aside.parent_path(), comfy / "custom_nodes");
  EXPECT_EQ(forced->moved_aside.extension(), ".disabled");
  EXPECT_EQ(read(forced->moved_aside / "precious.safetensors"), "weights");
  EXPECT_EQ(read(forced->moved_aside / "__init__.py"), "# another project\n");
  EXPECT_EQ(read(dest / "__init__.py"), "NODE_CLASS_MAPPINGS = {}\n");
  EXPECT_TRUE(fs::is_regular_file(dest / ".h3pipe-pack.json"));

  // Its own copy is updated in place when the pack changes (Python's caches do not count)...
  write(dest / "__pycache__" / "nodes.cpython-311.pyc", "cache");
  write(pack / "nodes.py", "# nodes v2\n");
  auto upd = install_nodes({comfy, pack});
  ASSERT_TRUE(upd.ok()) << upd.error().message;
  EXPECT_EQ(upd->action, "updated");
  EXPECT_TRUE(upd->moved_aside.empty());
  EXPECT_EQ(read(dest / "nodes.py"), "# nodes v2\n");

  // ...but not once a file was added to it or one of its files edited.
  write(dest / "my_notes.txt", "mine");
  write(pack / "nodes.py", "# nodes v3\n");
  auto added = install_nodes({comfy, pack});
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.error().message.find("my_notes.txt (not one it wrote)"), std::string::npos)
      << added.error().message;
  fs::remove(dest / "my_notes.txt");
  write(dest / "__init__.py", "# edited by hand\n");
  auto edited = install_nodes({comfy, pack, true, false});
  ASSERT_FALSE(edited.ok());
  EXPECT_NE(edited.error().message.find("__init__.py (changed since)"), std::string::npos)
      << edited.error().message;
  EXPECT_EQ(read(dest / "__init__.py"), "# edited by hand\n");
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

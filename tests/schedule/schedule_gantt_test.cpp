// The Gantt SVG: valid XML, one lane per resource; rendered by a real browser when one exists.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/schedule/gantt_svg.h"
#include "common/schedule/plan.h"

namespace h3pipe::schedule {
namespace fs = std::filesystem;
namespace {

fs::path temp_dir() {
  auto d = fs::temp_directory_path() /
           fmt::format("h3pipe_gantt_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

PlanResult plan_of(const std::string& topo, const char* cls, std::uint32_t n) {
  auto p = plan_file(std::string(H3PIPE_SOURCE_DIR) + "/configs/topologies/" + topo, cls, n, "",
                     false, 1);
  EXPECT_TRUE(p.ok());
  return p.value();
}

TEST(Gantt, ValidXmlWithOneLanePerResource) {
  auto p = plan_of("four_four_xtx_plus_one.json", "hd", 6);
  auto chart = gantt_from_sim(p.sim, "plan: four <four> & \"xtx\"");  // escaping
  const auto dir = temp_dir();
  const auto svg = dir / "plan.svg";
  std::ofstream(svg) << render_svg(chart);
  // Pools: 3 encoders, 3 samplers, 1 decoder; links: host-a->host-b, host-x->host-b.
  ASSERT_EQ(p.sim.lanes.size(), 9u);
  const std::string py = fmt::format(
      "/usr/bin/python3 -c \"import xml.etree.ElementTree as E,sys;"
      "r=E.parse(sys.argv[1]).getroot();ns='{{http://www.w3.org/2000/svg}}';"
      "assert r.tag==ns+'svg',r.tag;"
      "L=[g for g in r.iter(ns+'g') if g.get('class')=='lane'];"
      "B=[x for x in r.iter(ns+'rect') if x.get('class')=='bar'];"
      "print(len(L),len(B),sorted(set(g.get('data-kind') for g in L)),r.find(ns+'text').text)\" {}",
      svg.string());
  const std::string out = run(py + " 2>&1");
  // 6 jobs x (encode + sample + transfer + decode) bars.
  EXPECT_EQ(out, "9 24 ['decode', 'encode', 'sample', 'transfer'] plan: four <four> & \"xtx\"\n");
  fs::remove_all(dir);
}

TEST(Gantt, LanesAreInPipelineOrder) {
  auto p = plan_of("two_host_4xT10_3080ti.json", "sd", 2);
  auto chart = gantt_from_sim(p.sim, "t");
  ASSERT_EQ(chart.rows.size(), 4u);
  EXPECT_EQ(chart.rows[0].kind, "encode");
  EXPECT_EQ(chart.rows[1].kind, "sample");
  EXPECT_EQ(chart.rows[2].kind, "transfer");
  EXPECT_EQ(chart.rows[3].kind, "decode");
  EXPECT_EQ(chart.bars.size(), 8u);
}

TEST(Gantt, RendersInHeadlessChromiumWhenInstalled) {
  const char* candidates[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                              "/usr/bin/google-chrome"};
  std::string browser;
  for (const char* c : candidates)
    if (fs::exists(c)) browser = c;
  if (browser.empty()) GTEST_SKIP() << "no chromium: XML validation only";
  auto p = plan_of("two_host_4xT10_3080ti.json", "sd", 3);
  const auto dir = temp_dir();
  const auto svg = dir / "plan.svg";
  const auto png = dir / "plan.png";
  std::ofstream(svg) << render_svg(gantt_from_sim(p.sim, "render check"));
  const std::string cmd = fmt::format(
      "timeout 60 {} --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir={} "
      "--screenshot={} --window-size=1270,400 file://{} >/dev/null 2>&1",
      browser, (dir / "profile").string(), png.string(), svg.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(fs::exists(png));
  // A PNG of the requested size with more than one colour in it (the bars were drawn).
  const std::string check = fmt::format(
      "/usr/bin/python3 -c \"import struct,zlib,sys;d=open(sys.argv[1],'rb').read();"
      "assert d[:8]==b'\\x89PNG\\r\\n\\x1a\\n';w,h=struct.unpack('>II',d[16:24]);"
      "i=8;z=b''\n"
      "while i<len(d):\n"
      " n=struct.unpack('>I',d[i:i+4])[0];t=d[i+4:i+8]\n"
      " if t==b'IDAT': z+=d[i+8:i+8+n]\n"
      " i+=12+n\n"
      "raw=zlib.decompress(z);print(w,h,len(set(raw))>8)\" {}",
      png.string());
  EXPECT_EQ(run(check + " 2>&1"), "1270 400 True\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace h3pipe::schedule

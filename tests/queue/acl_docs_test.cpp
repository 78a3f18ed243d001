// docs/security.md's ACL table says exactly what configs/redis/users.acl grants (issue #22 item
// 9: the operator had eval, evalsha, script|load, sadd and scard the table did not show).  For
// every h3pipe-* user: the key patterns and the commands, selectors included, parsed from both.
// The Helm chart's copy of users.acl is the same file.  Label: unit.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/test_support.h"

namespace {

using Set = std::set<std::string>;
struct Rules {
  Set keys, commands;
};

std::string read(const std::string& rel) {
  std::ifstream in(ts::source(rel));
  return {std::istreambuf_iterator<char>(in), {}};
}

void add_tokens(const std::string& text, Rules& r) {
  std::istringstream in(text);
  for (std::string t; in >> t;) {
    if (t[0] == '~' || t.rfind("%R~", 0) == 0 || t.rfind("%W~", 0) == 0 || t.rfind("%RW~", 0) == 0)
      r.keys.insert(t);
    else if (t[0] == '+')
      r.commands.insert(t.substr(1));
  }
}

// user -> rules, from the ACL file (a selector's "(...)" adds its patterns and commands).
std::map<std::string, Rules> from_acl(const std::string& text) {
  std::map<std::string, Rules> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string kw, user;
    w >> kw >> user;
    if (kw != "user" || user.rfind("h3pipe-", 0) != 0) continue;
    std::string flat = line;
    for (char& c : flat)
      if (c == '(' || c == ')') c = ' ';
    add_tokens(flat, out[user]);
  }
  return out;
}

// Every backtick span of a table cell, with "\|" read as "|".
std::vector<std::string> spans_of(const std::string& cell) {
  std::vector<std::string> out;
  static const std::regex span("`([^`]*)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), span); it != std::sregex_iterator();
       ++it)
    out.push_back(std::regex_replace((*it)[1].str(), std::regex(R"(\\\|)"), "|"));
  return out;
}

// A table row's cells, split at each "|" not escaped as "\|".
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += "\\|";
      ++i;
      continue;
    }
    if (line[i] == '|') {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += line[i];
  }
  out.push_back(cur);
  return out;
}

// user -> rules, from the table's rows: the keys cell's spans; the commands cell's first span
// and each span after "selector " (the notes' spans name commands, they do not grant them).
std::map<std::string, Rules> from_docs(const std::string& md) {
  std::map<std::string, Rules> out;
  std::istringstream in(md);
  static const std::regex user_cell(R"(^ `(h3pipe-[a-z]+)` $)");
  for (std::string line; std::getline(in, line);) {
    const auto c = cells(line);
    std::smatch m;
    if (c.size() < 6 || !std::regex_match(c[1], m, user_cell)) continue;
    Rules& r = out[m[1]];
    for (const auto& s : spans_of(c[3])) add_tokens(s, r);
    const std::string& cmds = c[4];
    static const std::regex span("`([^`]*)`");
    bool first = true;
    for (auto it = std::sregex_iterator(cmds.begin(), cmds.end(), span);
         it != std::sregex_iterator(); ++it) {
      const auto pos = static_cast<std::size_t>(it->position());
      const bool after_selector = pos >= 9 && cmds.compare(pos - 9, 9, "selector ") == 0;
      if (first || after_selector) {
        std::istringstream w(std::regex_replace((*it)[1].str(), std::regex(R"(\\\|)"), "|"));
        for (std::string t; w >> t;) r.commands.insert(t);
      }
      first = false;
    }
  }
  return out;
}

std::string show(const Set& s) {
  std::string out;
  for (const auto& x : s) out += x + " ";
  return out;
}

}  // namespace

TEST(AclDocs, TheTableInSecurityMdIsWhatUsersAclGrants) {
  const auto acl = from_acl(read("configs/redis/users.acl"));
  const auto docs = from_docs(read("docs/security.md"));
  ASSERT_GE(acl.size(), 6u);
  for (const auto& [user, rules] : acl) {
    ASSERT_TRUE(docs.count(user)) << user << " has no row in docs/security.md";
    EXPECT_EQ(show(docs.at(user).commands), show(rules.commands)) << user << ": commands";
    EXPECT_EQ(show(docs.at(user).keys), show(rules.keys)) << user << ": key patterns";
  }
  for (const auto& [user, rules] : docs)
    EXPECT_TRUE(acl.count(user)) << user << " is in the docs only";
  EXPECT_EQ(read("configs/redis/users.acl"), read("helm/h3pipe/files/users.acl"));
}

// What issue #22 found: no runtime user but the services may load Lua; the operator runs only
// scripts already loaded (evalsha), never its own.
TEST(AclDocs, TheOperatorMayNotLoadOrRunItsOwnScripts) {
  const auto acl = from_acl(read("configs/redis/users.acl"));
  const Set& op = acl.at("h3pipe-operator").commands;
  for (const char* c :
       {"eval", "eval_ro", "script|load", "function|load", "fcall", "@scripting", "@all"})
    EXPECT_FALSE(op.count(c)) << c;
  EXPECT_TRUE(op.count("evalsha"));
}

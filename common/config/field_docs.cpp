#include "common/config/field_docs.h"

#include <deque>
#include <map>
#include <set>

#include "common/config/fields.h"

namespace h3pipe::config {
namespace {

using nlohmann::json;

std::string def_name(const std::string& table) {
  std::string out;
  for (char c : table) {
    if (c == '/')
      out += out.empty() ? "" : ".";
    else if (c == '*')
      out += "item";
    else if (c == ' ')
      out += "_";
    else
      out += c;
  }
  return out.empty() ? "cluster" : out;
}

std::string heading(const TableDoc& t) {
  return t.name.empty() ? "/" : t.name;
}

const char* scalar_name(FieldType t) {
  switch (t) {
    case FieldType::kString:
      return "string";
    case FieldType::kPath:
      return "path";
    case FieldType::kBool:
      return "boolean";
    case FieldType::kInteger:
      return "integer";
    case FieldType::kNumber:
      return "number";
    case FieldType::kStrings:
      return "array of strings";
    case FieldType::kIntegers:
      return "array of integers";
    case FieldType::kObject:
      return "object";
    case FieldType::kArray:
      return "array";
    case FieldType::kMap:
      return "object (name -> value)";
    case FieldType::kAny:
      return "any";
  }
  return "any";
}

std::string type_text(const FieldInfo& f) {
  if (f.sub) {
    const std::string where = heading(f.sub());
    if (f.type == FieldType::kArray) return fmt::format("array of `{}`", where);
    if (f.type == FieldType::kMap) return fmt::format("name -> `{}`", where);
    return fmt::format("`{}`", where);
  }
  if (f.type == FieldType::kArray && f.item != FieldType::kAny)
    return fmt::format("array of {}s", scalar_name(f.item));
  return scalar_name(f.type);
}

std::string number(double d) {
  return fmt::format("{}", d);
}

std::string allowed_text(const FieldInfo& f) {
  std::vector<std::string> parts;
  if (f.when.size()) parts.push_back("only when " + f.when);
  if (!f.choices.empty()) {
    std::vector<std::string> q;
    for (const auto& c : f.choices) q.push_back("`" + c + "`");
    parts.push_back(one_of(q));
  }
  if (f.count) parts.push_back(fmt::format("exactly {} items", *f.count));
  const bool ints = f.type == FieldType::kInteger || f.type == FieldType::kIntegers;
  if (ints && (f.imin || f.imax)) {
    const std::string lo = f.imin ? std::to_string(*f.imin) : "";
    const std::string hi = f.imax ? std::to_string(*f.imax) : "";
    parts.push_back(f.imax ? fmt::format("[{}, {}]", lo, hi) : fmt::format(">= {}", lo));
  }
  if (!ints && (f.dmin || f.dmax))
    parts.push_back(f.dmax
                        ? fmt::format("[{}, {}]", number(f.dmin.value_or(-1e300)), number(*f.dmax))
                        : fmt::format(">= {}", number(*f.dmin)));
  if (f.nonempty) parts.push_back("not empty");
  if (!f.rule.empty()) parts.push_back(f.rule);
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

std::string default_text(const FieldInfo& f, const json& d) {
  if (f.required) return "required";
  if (!f.default_text.empty()) return "`" + f.default_text + "`";
  if (d.is_null() || f.sub) return "";
  return "`" + d.dump() + "`";
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// The table and every table under it, each once, in the order first reached.
std::vector<TableDoc> walk(const TableDoc& root) {
  std::vector<TableDoc> out;
  std::set<std::string> seen{root.name};
  std::deque<TableDoc> todo{root};
  while (!todo.empty()) {
    TableDoc t = std::move(todo.front());
    todo.pop_front();
    for (const auto& f : t.fields)
      if (f.sub) {
        TableDoc s = f.sub();
        if (seen.insert(s.name).second) todo.push_back(std::move(s));
      }
    out.push_back(std::move(t));
  }
  return out;
}

std::string section(const TableDoc& t) {
  std::string out = fmt::format("## `{}`\n\n{}\n\n", heading(t), t.description);
  out += "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < t.fields.size(); ++i) {
    const auto& f = t.fields[i];
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", f.key, cell(type_text(f)),
                       cell(default_text(f, t.defaults[i])), cell(allowed_text(f)),
                       cell(f.description));
  }
  if (!t.rules.empty()) {
    out += "\nAcross its fields:";
    for (const auto& r : t.rules) out += " " + r + ".";
    out += "\n";
  }
  return out + "\n";
}

json scalar_schema(FieldType t) {
  switch (t) {
    case FieldType::kString:
    case FieldType::kPath:
      return {{"type", "string"}};
    case FieldType::kBool:
      return {{"type", "boolean"}};
    case FieldType::kInteger:
      return {{"type", "integer"}};
    case FieldType::kNumber:
      return {{"type", "number"}};
    case FieldType::kStrings:
      return {{"type", "array"}, {"items", {{"type", "string"}}}};
    case FieldType::kIntegers:
      return {{"type", "array"}, {"items", {{"type", "integer"}}}};
    case FieldType::kObject:
    case FieldType::kMap:
      return {{"type", "object"}};
    case FieldType::kArray:
      return {{"type", "array"}};
    case FieldType::kAny:
      return json::object();
  }
  return json::object();
}

json field_schema(const FieldInfo& f, const json& d) {
  json s = scalar_schema(f.type);
  const std::string ref = f.sub ? "#/definitions/" + def_name(f.sub().name) : "";
  if (f.sub && f.type == FieldType::kObject)
    s = {{"$ref", ref}};
  else if (f.sub && f.type == FieldType::kArray)
    s["items"] = {{"$ref", ref}};
  else if (f.sub && f.type == FieldType::kMap)
    s["additionalProperties"] = {{"$ref", ref}};
  else if (f.type == FieldType::kArray && f.item != FieldType::kAny)
    s["items"] = scalar_schema(f.item);
  json& range = f.type == FieldType::kIntegers || f.type == FieldType::kArray ? s["items"] : s;
  if (f.imin) range["minimum"] = *f.imin;
  if (f.imax) range["maximum"] = *f.imax;
  if (f.dmin) range["minimum"] = *f.dmin;
  if (f.dmax) range["maximum"] = *f.dmax;
  if (f.count) s["minItems"] = s["maxItems"] = *f.count;
  if (f.type == FieldType::kArray && f.rule == "not empty") s["minItems"] = 1;
  if (!f.choices.empty()) s["enum"] = f.choices;
  if (f.nonempty) s["minLength"] = 1;
  if (!f.sub) {
    std::string desc = f.description;
    if (!f.when.empty()) desc += " (when " + f.when + ")";
    s["description"] = desc;
  }
  if (!f.required && f.default_text.empty() && !d.is_null() && !f.sub) s["default"] = d;
  return s;
}

json object_schema(const TableDoc& t) {
  json props = json::object(), required = json::array();
  std::map<std::string, std::vector<json>> by_key;
  std::vector<std::string> order;
  for (std::size_t i = 0; i < t.fields.size(); ++i) {
    const auto& f = t.fields[i];
    if (!by_key.count(f.key)) order.push_back(f.key);
    by_key[f.key].push_back(field_schema(f, t.defaults[i]));
    if (f.required && f.when.empty()) required.push_back(f.key);
  }
  for (const auto& k : order) {
    const auto& v = by_key[k];
    props[k] = v.size() == 1 ? v[0] : json{{"anyOf", v}};
  }
  json s = {{"type", "object"},
            {"description", t.description},
            {"properties", props},
            {"additionalProperties", false}};
  if (!required.empty()) s["required"] = required;
  return s;
}

}  // namespace

std::string config_markdown(const std::vector<TableDoc>& extra) {
  std::string out =
      "# Cluster config\n\n"
      "<!-- Generated by `build/tests/h3pipe_config_gen docs > docs/config.md` from the field "
      "tables\n"
      "     (common/config/fields.cpp, common/model/config.cpp); the config_docs_check test fails\n"
      "     when they differ. -->\n\n"
      "One JSON file (docs/design.md), `--config FILE` or the embedded default "
      "(configs/local.json).\n"
      "It is loaded strictly: a key no table below names, a value of the wrong type or out of its\n"
      "range is an error naming its JSON pointer (`/pools/1/gpus/0: expected an integer`); every\n"
      "error is reported, together, and the command exits 2.  Relative paths resolve against the\n"
      "config file's folder, `~/` against `$HOME`.  The Helm chart's `values.schema.json`\n"
      "(helm/h3pipe) holds the same object as its `cluster` value.\n\n"
      "Each section is one JSON object; `*` stands for an array index or a map key.\n\n";
  const auto tables = walk(describe(cluster_table()));
  out += section(tables.front());
  out += "## Rules across objects\n\nChecked after every object has been read:\n\n";
  for (const auto& r : cluster_rules()) out += "- " + r + "\n";
  out += "\n";
  for (std::size_t i = 1; i < tables.size(); ++i) out += section(tables[i]);
  for (const auto& t : extra)
    for (const auto& s : walk(t)) out += section(s);
  while (out.size() > 1 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n')
    out.pop_back();
  return out;
}

json cluster_schema() {
  const auto tables = walk(describe(cluster_table()));
  json s = object_schema(tables.front());
  s["$schema"] = "http://json-schema.org/draft-07/schema#";
  s["title"] = "h3pipe cluster config (docs/config.md)";
  json defs = json::object();
  for (std::size_t i = 1; i < tables.size(); ++i)
    defs[def_name(tables[i].name)] = object_schema(tables[i]);
  s["definitions"] = defs;
  return s;
}

}  // namespace h3pipe::config

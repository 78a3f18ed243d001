#pragma once
// A config declared once (issue #26): each JSON object is a Table of Fields, and each Field is its
// key, type, default, range or choices, a one-line description and the struct member it fills.
// The loader walks the tables (read_table), docs/config.md and the JSON Schema are printed from
// them (field_docs.h).  Reading is ObjectReader's (json_reader.h): every problem is added to the
// Errors with its JSON pointer, a key no field names is an error, nothing stops at the first one.
//
// Defaults: a field's default is its member's value in a default-constructed struct (the
// initialisers in config.h, model.h), read through the field's binding, so the docs and the
// schema cannot disagree with the loader; `default_text` says it in words where it is computed at
// load (the roots under state_dir).
//
// Threading: tables are immutable after construction (function-local statics); reading is pure.
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/core/json_reader.h"

namespace h3pipe::json_reader {

enum class FieldType {
  kString,
  kPath,
  kBool,
  kInteger,
  kNumber,
  kStrings,
  kIntegers,
  kObject,
  kArray,
  kMap,
  kAny
};

// How a table words a wrong value.  kStrict, the cluster config's: "expected an integer, got
// string", "0 is out of range [1, 10]".  kExpected, the builtin model settings': "expected an
// integer in [1, 10]" for either fault.  Tests assert both; each table keeps its own.
enum class Wording { kStrict, kExpected };

struct TableDoc;

// What a field is: for the loader's checks, docs/config.md and the schema.
struct FieldInfo {
  std::string key;
  FieldType type = FieldType::kString;
  std::string description;
  bool required = false;
  bool nonempty = false;                // a present string must not be ""
  bool path = false;                    // a path: relative ones resolve against the file's folder
  std::optional<long long> imin, imax;  // integers and the items of integer lists
  std::optional<double> dmin, dmax;     // numbers
  std::vector<std::string> choices;     // strings: the values allowed ("" too unless nonempty)
  std::string noun;                     // choices: "unknown <noun> \"x\"; expected a, b or c"
  std::optional<std::size_t> count;     // integer lists of exactly this many items
  std::string default_text;             // a default in words, where the struct cannot hold it
  std::string when;                     // read only when ..., in words ("kind is fixed")
  std::string rule;                     // a further check, in words
  std::function<TableDoc()> sub;        // objects, arrays and maps of objects: the items' table
  FieldType item = FieldType::kAny;     // kArray / kMap of scalars
};

// Options of a field builder (the FieldInfo fields a table sets).
struct Opts {
  bool required = false;
  bool nonempty = false;
  bool path = false;
  std::optional<long long> imin, imax;
  std::optional<double> dmin, dmax;
  std::vector<std::string> choices;
  std::string noun;
  std::optional<std::size_t> count;
  std::string default_text;
  std::string rule;
};

struct ReadContext {
  Errors& errors;
  std::filesystem::path base_dir;
  Wording wording = Wording::kStrict;
};

template <class S>
struct Field {
  FieldInfo info;
  // Reads info.key of `r` into `s`; false stops reading the object (an unknown discriminator).
  std::function<bool(ObjectReader& r, const FieldInfo& f, S& s, const ReadContext& ctx)> read;
  std::function<bool(const S&)> when;             // null: always read
  std::function<nlohmann::json(const S&)> value;  // the member as JSON (the default, for docs)
};

template <class S>
struct Table {
  std::string name;  // the object's pointer in docs: "/queue", "/pools/*"
  std::string description;
  std::vector<Field<S>> fields;
  // Rules across the object's fields, after them (only when the object is present).
  std::function<void(ObjectReader& r, S& s, const ReadContext& ctx)> check;
  std::vector<std::string> rules;  // what `check` enforces, in words
};

// A table without its bindings: what the docs and the schema print.
struct TableDoc {
  std::string name, description;
  std::vector<FieldInfo> fields;
  std::vector<nlohmann::json> defaults;  // fields[i]'s default; null: none
  std::vector<std::string> rules;
};

template <class S>
TableDoc describe(const Table<S>& t) {
  TableDoc d{t.name, t.description, {}, {}, t.rules};
  const S s{};
  for (const auto& f : t.fields) {
    d.fields.push_back(f.info);
    d.defaults.push_back(f.value ? f.value(s) : nlohmann::json());
  }
  return d;
}

// Definitions of the readers (header-only: common/model reads its settings with these too,
// without linking h3pipe::config).
inline std::filesystem::path resolve_path(const std::filesystem::path& base, const std::string& p) {
  if (p.empty()) return {};
  if (p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "/") / p.substr(2);
  }
  std::filesystem::path fp(p);
  return fp.is_absolute() ? fp : base / fp;
}

inline std::string one_of(const std::vector<std::string>& choices) {
  std::string out;
  for (std::size_t i = 0; i < choices.size(); ++i)
    out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return out;
}

namespace detail {

inline std::string expected_range(const FieldInfo& f, const char* what) {
  if (f.type == FieldType::kNumber)
    return fmt::format("expected {} in [{}, {}]", what, f.dmin.value_or(-1e300),
                       f.dmax.value_or(1e300));
  return fmt::format("expected {} in [{}, {}]", what,
                     f.imin.value_or(std::numeric_limits<int>::min()),
                     f.imax.value_or(std::numeric_limits<int>::max()));
}

inline void wrong(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                  const nlohmann::json& got, const char* what) {
  if (ctx.wording == Wording::kStrict)
    ctx.errors.add(r.path(f.key), fmt::format("expected {}, got {}", what, got.type_name()));
  else if (f.type == FieldType::kInteger || f.type == FieldType::kNumber)
    ctx.errors.add(r.path(f.key), expected_range(f, what));
  else
    ctx.errors.add(r.path(f.key), fmt::format("expected {}", what));
}

inline const nlohmann::json* value_of(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx) {
  const bool present = r.has(f.key);
  const auto* v = r.raw(f.key);  // marks the key known
  if (!present && f.required && r.ok()) ctx.errors.add(r.path(f.key), "required but missing");
  return v;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                       std::string& out) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (!v->is_string()) {
    wrong(r, f, ctx, *v, "a string");
    return false;
  }
  out = v->get<std::string>();
  if (f.nonempty && out.empty()) ctx.errors.add(r.path(f.key), "must not be empty");
  if (!f.choices.empty() && !(f.nonempty && out.empty())) {
    bool known = false;
    for (const auto& c : f.choices) known = known || c == out;
    if (!known)
      ctx.errors.add(r.path(f.key), f.noun.empty()
                                        ? fmt::format("\"{}\": expected {}", out, one_of(f.choices))
                                        : fmt::format("unknown {} \"{}\"; expected {}", f.noun, out,
                                                      one_of(f.choices)));
  }
  if (f.path) out = resolve_path(ctx.base_dir, out).string();
  return true;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                       std::filesystem::path& out) {
  std::string s;
  if (!read_value(r, f, ctx, s)) return false;
  out = resolve_path(ctx.base_dir, s);  // f.path: already resolved, and resolving is idempotent
  return true;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx, bool& out) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (!v->is_boolean()) {
    wrong(r, f, ctx, *v, "true or false");
    return false;
  }
  out = v->get<bool>();
  return true;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx, double& out) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (!v->is_number()) {
    wrong(r, f, ctx, *v, "a number");
    return false;
  }
  const double d = v->get<double>(), lo = f.dmin.value_or(-1e300), hi = f.dmax.value_or(1e300);
  if (d < lo || d > hi) {
    if (ctx.wording == Wording::kStrict)
      ctx.errors.add(r.path(f.key), fmt::format("{} is out of range [{}, {}]", d, lo, hi));
    else
      ctx.errors.add(r.path(f.key), expected_range(f, "a number"));
    return false;
  }
  out = d;
  return true;
}

inline bool read_integer(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                         long long& out, bool u64, std::uint64_t& out_u64) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (u64) {
    if (v->is_number_unsigned())
      out_u64 = v->get<std::uint64_t>();
    else if (v->is_number_integer() && v->get<long long>() >= 0)
      out_u64 = static_cast<std::uint64_t>(v->get<long long>());
    else {
      ctx.errors.add(r.path(f.key), "expected a non-negative integer");
      return false;
    }
    return true;
  }
  if (!v->is_number_integer()) {
    wrong(r, f, ctx, *v, "an integer");
    return false;
  }
  const long long n = v->is_number_unsigned() ? static_cast<long long>(v->get<unsigned long long>())
                                              : v->get<long long>();
  const long long lo = f.imin.value_or(std::numeric_limits<int>::min());
  const long long hi = f.imax.value_or(std::numeric_limits<int>::max());
  if (n < lo || n > hi) {
    if (ctx.wording == Wording::kStrict)
      ctx.errors.add(r.path(f.key), fmt::format("{} is out of range [{}, {}]", n, lo, hi));
    else
      ctx.errors.add(r.path(f.key), expected_range(f, "an integer"));
    return false;
  }
  out = n;
  return true;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                       std::vector<std::string>& out) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (!v->is_array()) {
    wrong(r, f, ctx, *v, "an array of strings");
    return false;
  }
  out.clear();
  for (std::size_t i = 0; i < v->size(); ++i) {
    if ((*v)[i].is_string())
      out.push_back((*v)[i].get<std::string>());
    else
      ctx.errors.add(fmt::format("{}/{}", r.path(f.key), i), "expected a string");
  }
  return true;
}

inline bool read_value(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx,
                       std::vector<int>& out) {
  const auto* v = value_of(r, f, ctx);
  if (!v) return false;
  if (f.count) {  // a fixed-size list: one message for any fault (the model's vae_channels)
    const long long lo = f.imin.value_or(std::numeric_limits<int>::min());
    const long long hi = f.imax.value_or(std::numeric_limits<int>::max());
    bool good = v->is_array() && v->size() == *f.count;
    std::vector<int> got;
    for (std::size_t i = 0; good && i < v->size(); ++i) {
      const auto& x = (*v)[i];
      good = x.is_number_integer() && x.get<long>() >= lo && x.get<long>() <= hi;
      if (good) got.push_back(static_cast<int>(x.get<long>()));
    }
    if (!good) {
      ctx.errors.add(r.path(f.key),
                     fmt::format("expected an array of {} integers in [{}, {}]", *f.count, lo, hi));
      return false;
    }
    out = std::move(got);
    return true;
  }
  if (!v->is_array()) {
    wrong(r, f, ctx, *v, "an array of integers");
    return false;
  }
  out.clear();
  for (std::size_t i = 0; i < v->size(); ++i) {
    if ((*v)[i].is_number_integer())
      out.push_back((*v)[i].get<int>());
    else
      ctx.errors.add(fmt::format("{}/{}", r.path(f.key), i), "expected an integer");
  }
  return true;
}

template <class M>
constexpr FieldType type_of() {
  if constexpr (std::is_same_v<M, std::string>)
    return FieldType::kString;
  else if constexpr (std::is_same_v<M, std::filesystem::path>)
    return FieldType::kPath;
  else if constexpr (std::is_same_v<M, bool>)
    return FieldType::kBool;
  else if constexpr (std::is_integral_v<M>)
    return FieldType::kInteger;
  else if constexpr (std::is_floating_point_v<M>)
    return FieldType::kNumber;
  else if constexpr (std::is_same_v<M, std::vector<std::string>>)
    return FieldType::kStrings;
  else if constexpr (std::is_same_v<M, std::vector<int>>)
    return FieldType::kIntegers;
  else
    return FieldType::kAny;
}

template <class M>
bool read_member(ObjectReader& r, const FieldInfo& f, const ReadContext& ctx, M& out) {
  if constexpr (std::is_integral_v<M> && !std::is_same_v<M, bool>) {
    long long n = 0;
    std::uint64_t u = 0;
    const bool u64 = std::is_same_v<M, std::uint64_t> && ctx.wording == Wording::kExpected;
    if (!read_integer(r, f, ctx, n, u64, u)) return false;
    out = u64 ? static_cast<M>(u) : static_cast<M>(n);
    return true;
  } else {
    return read_value(r, f, ctx, out);
  }
}

inline FieldInfo info(std::string key, FieldType type, std::string desc, const Opts& o) {
  FieldInfo f;
  f.key = std::move(key);
  f.type = o.path ? FieldType::kPath : type;
  f.description = std::move(desc);
  f.required = o.required;
  f.nonempty = o.nonempty;
  f.path = o.path;
  f.imin = o.imin;
  f.imax = o.imax;
  f.dmin = o.dmin;
  f.dmax = o.dmax;
  f.choices = o.choices;
  f.noun = o.noun;
  f.count = o.count;
  f.default_text = o.default_text;
  f.rule = o.rule;
  return f;
}

template <class M>
nlohmann::json as_json(const M& m) {
  if constexpr (std::is_same_v<M, std::filesystem::path>)
    return m.string();
  else
    return nlohmann::json(m);
}

}  // namespace detail

// A scalar or list member.  `check` (optional) returns an error text for a value read ("" = ok).
template <class S, class M>
Field<S> field(std::string key, M S::*m, std::string desc, Opts o = {},
               std::function<std::string(const M&)> check = {}) {
  Field<S> f;
  f.info = detail::info(std::move(key), detail::type_of<M>(), std::move(desc), o);
  f.read = [m, check](ObjectReader& r, const FieldInfo& fi, S& s, const ReadContext& ctx) {
    if (detail::read_member(r, fi, ctx, s.*m) && check)
      if (auto why = check(s.*m); !why.empty()) ctx.errors.add(r.path(fi.key), why);
    return true;
  };
  f.value = [m](const S& s) { return detail::as_json(s.*m); };
  return f;
}

// The field only when `p` holds (an earlier field, a discriminator, decides); `text` says when.
template <class S>
Field<S> only_when(Field<S> f, std::string text,
                   std::type_identity_t<std::function<bool(const S&)>> p) {
  f.info.when = std::move(text);
  f.when = std::move(p);
  return f;
}

// Reads `j` (an object, else an error) into `out` by `t`; unknown keys reported at the end.
template <class T>
void read_table(const nlohmann::json& j, const std::string& path, const Table<T>& t, T& out,
                const ReadContext& ctx) {
  ObjectReader r(j, path, ctx.errors);
  if (!r.ok()) return;
  for (const auto& f : t.fields) {
    if (f.when && !f.when(out)) continue;
    if (!f.read(r, f.info, out, ctx)) break;
  }
  if (t.check) t.check(r, out, ctx);
}

// A nested object (a T member, or a std::optional<T> set when the key is present).
template <class S, class M, class T>
Field<S> object(std::string key, M S::*m, const Table<T>& (*table)(), std::string desc) {
  Field<S> f;
  f.info = detail::info(std::move(key), FieldType::kObject, std::move(desc), {});
  f.info.sub = [table] { return describe(table()); };
  f.read = [m, table](ObjectReader& r, const FieldInfo& fi, S& s, const ReadContext& ctx) {
    if (const auto* v = r.raw(fi.key)) {
      if constexpr (std::is_same_v<M, std::optional<T>>) {
        T t{};
        read_table(*v, r.path(fi.key), table(), t, ctx);
        s.*m = std::move(t);
      } else {
        read_table(*v, r.path(fi.key), table(), s.*m, ctx);
      }
    }
    return true;
  };
  return f;
}

// An array of objects.
template <class S, class T>
Field<S> array(std::string key, std::vector<T> S::*m, const Table<T>& (*table)(),
               std::string desc) {
  Field<S> f;
  f.info = detail::info(std::move(key), FieldType::kArray, std::move(desc), {});
  f.info.sub = [table] { return describe(table()); };
  f.read = [m, table](ObjectReader& r, const FieldInfo& fi, S& s, const ReadContext& ctx) {
    const auto* v = r.raw(fi.key);
    if (!v) return true;
    if (!v->is_array()) {
      ctx.errors.add(r.path(fi.key), "expected an array");
      return true;
    }
    for (std::size_t i = 0; i < v->size(); ++i) {
      T t{};
      read_table((*v)[i], fmt::format("{}/{}", r.path(fi.key), i), table(), t, ctx);
      (s.*m).push_back(std::move(t));
    }
    return true;
  };
  return f;
}

// An object mapping a name to an object of `table`; `not_object` words a value that is not one.
template <class S, class T>
Field<S> map(std::string key, std::map<std::string, T> S::*m, const Table<T>& (*table)(),
             std::string desc, std::string not_object) {
  Field<S> f;
  f.info = detail::info(std::move(key), FieldType::kMap, std::move(desc), {});
  f.info.sub = [table] { return describe(table()); };
  f.read = [m, table, not_object](ObjectReader& r, const FieldInfo& fi, S& s,
                                  const ReadContext& ctx) {
    const auto* v = r.raw(fi.key);
    if (!v) return true;
    if (!v->is_object()) {
      ctx.errors.add(r.path(fi.key), not_object);
      return true;
    }
    for (auto it = v->begin(); it != v->end(); ++it) {
      T t{};
      read_table(it.value(), r.path(fi.key) + "/" + it.key(), table(), t, ctx);
      (s.*m)[it.key()] = std::move(t);
    }
    return true;
  };
  return f;
}

// A field read by its own code (a discriminator, a value with a shape of its own).
template <class S>
Field<S> custom(FieldInfo info,
                std::function<bool(ObjectReader&, const FieldInfo&, S&, const ReadContext&)> read,
                std::function<nlohmann::json(const S&)> value = {}) {
  Field<S> f;
  f.info = std::move(info);
  f.read = std::move(read);
  f.value = std::move(value);
  return f;
}

}  // namespace h3pipe::json_reader

// The config module (and every reader that came from it) names these config::ObjectReader,
// config::Errors, ...: the same types.
namespace h3pipe::config {
using namespace h3pipe::json_reader;  // NOLINT(google-build-using-namespace)
}  // namespace h3pipe::config

// Reading the job config: a visitor over the schema in config_schema.h that
// collects every problem, then each section's checks that span several keys
// (beside its schema there). Writing and documenting it: config_writers.cpp.
#include "common/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "common/config_schema.h"
#include "common/file_bytes.h"
#include "common/quoted.h"

namespace saccade {
namespace {

using config_schema::describe;
using config_schema::join_path;

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Where each problem is reported; collects them all before refusing.
struct Problems {
  std::string source;
  std::vector<std::string> list;
  std::map<std::string, toml::source_region> where;  // key path -> position, for cross-key checks

  // A node's region names its own file: a key from an included base is reported there.
  std::string at(const toml::source_region& r) const {
    const std::string& file = r.path && !r.path->empty() ? *r.path : source;
    return r.begin.line ? fmt::format("{}:{}:{}", file, r.begin.line, r.begin.column) : file;
  }
  void add(const toml::source_region& r, const std::string& path, const std::string& what) {
    list.push_back(fmt::format("{}: {}: {}", at(r), path, what));
  }
  void add(const std::string& path, const std::string& what) {
    auto it = where.find(path);
    add(it == where.end() ? toml::source_region{} : it->second, path, what);
  }
};

// Fills a struct from one TOML table (or with defaults where the table or key is absent).
class Reader {
 public:
  Reader(Problems& problems, const toml::table* table, std::string prefix)
      : problems_(problems), table_(table), prefix_(std::move(prefix)) {}

  template <class T>
  void section(const char* name, const char* /*doc*/, T& c) {
    const toml::node* n = lookup(name);
    const toml::table* sub = n ? n->as_table() : nullptr;
    if (n && !sub) {
      problems_.add(
          n->source(), join_path(prefix_, name),
          fmt::format("expected a table [{}], got {}", join_path(prefix_, name), type_name(*n)));
    }
    Reader child(problems_, sub, join_path(prefix_, name));
    describe(child, c);
    child.reject_unknown();
  }

  void integer(const char* name, int64_t& f, int64_t def, int64_t lo, int64_t hi, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    if (!n->is_integer()) return wrong(*n, name, fmt::format("an integer in [{}, {}]", lo, hi));
    int64_t x = n->as_integer()->get();
    if (x < lo || x > hi) {
      return problems_.add(n->source(), path(name),
                           fmt::format("expected an integer in [{}, {}], got {}", lo, hi, x));
    }
    f = x;
  }

  void number(const char* name, double& f, double def, double lo, double hi, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    std::optional<double> x = n->value<double>();  // integers are accepted as numbers
    if (!n->is_number() || !x) return wrong(*n, name, fmt::format("a number in [{}, {}]", lo, hi));
    if (!(*x >= lo && *x <= hi)) {
      return problems_.add(n->source(), path(name),
                           fmt::format("expected a number in [{}, {}], got {}", lo, hi, *x));
    }
    f = *x;
  }

  void boolean(const char* name, bool& f, bool def, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    if (!n->is_boolean()) return wrong(*n, name, "a boolean (true or false)");
    f = n->as_boolean()->get();
  }

  void text(const char* name, std::string& f, const char* def, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    if (!n->is_string()) return wrong(*n, name, "a string");
    f = n->as_string()->get();
  }

  void choice(const char* name, std::string& f, const char* def, std::vector<std::string> options,
              const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    const std::string expected = fmt::format("one of \"{}\"", fmt::join(options, "\", \""));
    if (!n->is_string()) return wrong(*n, name, expected);
    const std::string& x = n->as_string()->get();
    if (std::find(options.begin(), options.end(), x) == options.end()) {
      return problems_.add(n->source(), path(name),
                           fmt::format("expected {}, got \"{}\"", expected, x));
    }
    f = x;
  }

  void numbers(const char* name, std::vector<double>& f, std::vector<double> def, double lo,
               double hi, bool may_be_empty, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    const std::string expected =
        fmt::format("a{} array of numbers in [{}, {}]", may_be_empty ? "n" : " non-empty", lo, hi);
    const toml::array* a = n->as_array();
    if (!a || (a->empty() && !may_be_empty)) return wrong(*n, name, expected);
    std::vector<double> out;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      std::optional<double> x = e.value<double>();
      if (!e.is_number() || !x || !(*x >= lo && *x <= hi)) {
        return problems_.add(
            e.source(), fmt::format("{}[{}]", path(name), i),
            fmt::format("expected {}, got {}", expected, x ? fmt::format("{}", *x) : type_name(e)));
      }
      out.push_back(*x);
    }
    f = out;
  }

  void choices(const char* name, std::vector<std::string>& f, std::vector<std::string> def,
               std::vector<std::string> options, const char*) {
    f = def;
    const toml::node* n = lookup(name);
    if (!n) return;
    const std::string expected =
        fmt::format("an array of distinct values from \"{}\"", fmt::join(options, "\", \""));
    const toml::array* a = n->as_array();
    if (!a) return wrong(*n, name, expected);
    std::vector<std::string> out;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      const std::string* s = e.is_string() ? &e.as_string()->get() : nullptr;
      if (!s || std::find(options.begin(), options.end(), *s) == options.end() ||
          std::find(out.begin(), out.end(), *s) != out.end()) {
        return problems_.add(
            e.source(), fmt::format("{}[{}]", path(name), i),
            fmt::format("expected {}, got {}", expected, s ? quote_text(*s) : type_name(e)));
      }
      out.push_back(*s);
    }
    f = out;
  }

  template <class T>
  void table_array(const char* name, std::vector<T>& f, size_t default_count, const char*) {
    T dflt;
    Reader defaults(problems_, nullptr, "");
    describe(defaults, dflt);
    f.assign(default_count, dflt);
    const toml::node* n = lookup(name);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a || a->empty() || !a->is_array_of_tables()) {
      return wrong(*n, name, fmt::format("a non-empty array of tables ([[{}]])", path(name)));
    }
    f.clear();
    for (size_t i = 0; i < a->size(); ++i) {
      Reader child(problems_, a->get(i)->as_table(), fmt::format("{}[{}]", path(name), i));
      T item;
      describe(child, item);
      child.reject_unknown();
      f.push_back(item);
    }
  }

  void reject_unknown() {
    if (!table_) return;
    for (auto&& [key, node] : *table_) {
      const std::string k(key.str());
      if (known_.count(k)) continue;
      std::string hint;
      for (const std::string& cand : known_) {
        if (edit_distance(k, cand) <= 2) hint = fmt::format("; did you mean '{}'?", cand);
      }
      if (hint.empty()) {
        hint = fmt::format("; valid keys{}: {}", prefix_.empty() ? "" : " in [" + prefix_ + "]",
                           fmt::join(known_, ", "));
      }
      problems_.add(key.source(), path(k), "unknown key" + hint);
    }
  }

 private:
  std::string path(std::string_view name) const { return join_path(prefix_, name); }

  const toml::node* lookup(const char* name) {
    known_.insert(name);
    const toml::node* n = table_ ? table_->get(name) : nullptr;
    if (n) problems_.where[path(name)] = n->source();
    return n;
  }

  void wrong(const toml::node& n, const char* name, const std::string& expected) {
    problems_.add(n.source(), path(name),
                  fmt::format("expected {}, got {}", expected, type_name(n)));
  }

  Problems& problems_;
  const toml::table* table_;  // not owned; null = section absent, all defaults
  std::string prefix_;
  std::set<std::string> known_;
};

// Moves `top`'s keys over `base`'s: tables merge key by key, any other value (an
// array of tables too) replaces the base's. Moves keep each node's source region.
void merge_over(toml::table& base, toml::table&& top) {
  for (auto&& [key, node] : top) {
    toml::node* below = base.get(key.str());
    if (below && below->is_table() && node.is_table()) {
      merge_over(*below->as_table(), std::move(*node.as_table()));
    } else {
      base.insert_or_assign(key, std::move(node));
    }
  }
}

// One file being read; the chain of them, outermost first, refuses an include cycle.
struct IncludedFile {
  std::string id;    // weakly canonical path
  std::string name;  // as the messages name it
};
using IncludeChain = std::vector<IncludedFile>;

constexpr size_t kMaxIncludeDepth = 16;

std::string canonical_id(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::path id = std::filesystem::weakly_canonical(file, ec);
  return ec ? file.lexically_normal().string() : id.string();
}

// Replaces `root` (read from `file`) by its top-level `include` (a path relative to
// `file`'s folder) with root's keys merged over it, recursively. Problems are added,
// not thrown, so that a refusal lists them all.
void resolve_include(toml::table& root, const std::string& file, IncludeChain& chain,
                     Problems& problems) {
  const toml::node* include = root.get("include");
  if (!include) return;
  const toml::source_region where = include->source();
  if (!include->is_string()) {
    return problems.add(
        where, "include",
        fmt::format("expected a string, the path of a base config, got {}", type_name(*include)));
  }
  std::filesystem::path target(include->as_string()->get());
  if (target.is_relative()) target = std::filesystem::path(file).parent_path() / target;
  const std::string name = target.lexically_normal().string();
  const std::string id = canonical_id(target);
  if (std::any_of(chain.begin(), chain.end(), [&](const IncludedFile& f) { return f.id == id; })) {
    std::vector<std::string> names;
    for (const IncludedFile& f : chain) names.push_back(f.name);
    return problems.add(
        where, "include",
        fmt::format("\"{}\" includes itself: {} -> {}", name, fmt::join(names, " -> "), name));
  }
  if (chain.size() >= kMaxIncludeDepth) {
    return problems.add(where, "include",
                        fmt::format("expected at most {} nested includes, reached at \"{}\"",
                                    kMaxIncludeDepth, name));
  }
  std::string text;
  try {
    text = read_file_bytes(target);
  } catch (const std::runtime_error&) {
    return problems.add(where, "include", fmt::format("cannot open \"{}\"", name));
  }
  toml::table base;
  try {
    base = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    problems.list.push_back(fmt::format("{}: TOML syntax error (included from {}): {}",
                                        problems.at(e.source()), problems.at(where),
                                        e.description()));
    return;
  }
  root.erase("include");
  chain.push_back({id, name});
  resolve_include(base, name, chain, problems);
  chain.pop_back();
  merge_over(base, std::move(root));
  root = std::move(base);
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error(fmt::format("{}", fmt::join(problems, "\n"))),
      problems_(std::move(problems)) {}

double effective_lr(const SslConfig& ssl) {
  const double batches_of_1024 = static_cast<double>(ssl.batch_size) / 1024.0;
  if (ssl.lr_scaling == "linear") return ssl.lr * batches_of_1024;
  if (ssl.lr_scaling == "sqrt") return ssl.lr * std::sqrt(batches_of_1024);
  return ssl.lr;
}

JobConfig default_config() {
  return parse_config("", "<defaults>");
}

JobConfig parse_config(std::string_view toml_text, std::string_view source_name) {
  Problems problems{std::string(source_name), {}, {}};
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    problems.list.push_back(
        fmt::format("{}: TOML syntax error: {}", problems.at(e.source()), e.description()));
    throw ConfigError(problems.list);
  }
  IncludeChain chain{{canonical_id(std::string(source_name)), std::string(source_name)}};
  resolve_include(root, std::string(source_name), chain, problems);
  if (!problems.list.empty()) throw ConfigError(problems.list);
  JobConfig config;
  Reader reader(problems, &root, "");
  describe(reader, config);
  reader.reject_unknown();
  if (problems.list.empty()) {
    config_schema::CrossKeyProblems cross_key;
    config_schema::check(config, cross_key);
    for (const auto& [key, what] : cross_key.found) problems.add(key, what);
  }
  if (!problems.list.empty()) throw ConfigError(problems.list);
  return config;
}

JobConfig load_config(const std::filesystem::path& file) {
  std::string text;
  try {
    text = read_file_bytes(file);
  } catch (const std::runtime_error&) {
    throw ConfigError({fmt::format("{}: cannot open the config file", file.string())});
  }
  return parse_config(text, file.string());
}

}  // namespace saccade

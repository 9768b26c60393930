// Writing the job config back as TOML (`saccade config show`, what agents and
// the coordinator's database hold) and documenting it (docs/config.md): two
// visitors over the schema in config_schema.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/config_schema.h"
#include "common/quoted.h"

namespace saccade {
namespace {

using config_schema::describe;
using config_schema::join_path;

// Shortest text that reads back as the same double and as a TOML float.
std::string float_text(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Emits TOML in schema order, each key with its meaning as a comment.
class TomlWriter {
 public:
  explicit TomlWriter(std::string prefix = "") : prefix_(std::move(prefix)) {}
  std::string str() const { return out_ + deferred_; }

  template <class T>
  void section(const char* name, const char* doc, T& c) {
    TomlWriter child(join_path(prefix_, name));
    describe(child, c);
    out_ += fmt::format("\n# {}\n[{}]\n{}", doc, join_path(prefix_, name), child.str());
  }
  void integer(const char* n, int64_t& f, int64_t, int64_t, int64_t, const char* d) {
    line(n, fmt::format("{}", f), d);
  }
  void number(const char* n, double& f, double, double, double, const char* d) {
    line(n, float_text(f), d);
  }
  void boolean(const char* n, bool& f, bool, const char* d) { line(n, f ? "true" : "false", d); }
  void text(const char* n, std::string& f, const char*, const char* d) {
    line(n, quote_text(f), d);
  }
  void choice(const char* n, std::string& f, const char*, const std::vector<std::string>&,
              const char* d) {
    line(n, quote_text(f), d);
  }
  void numbers(const char* n, std::vector<double>& f, const std::vector<double>&, double, double,
               bool, const char* d) {
    std::vector<std::string> parts;
    for (double x : f) parts.push_back(float_text(x));
    line(n, fmt::format("[{}]", fmt::join(parts, ", ")), d);
  }
  void choices(const char* n, std::vector<std::string>& f, const std::vector<std::string>&,
               const std::vector<std::string>&, const char* d) {
    std::vector<std::string> parts;
    for (const std::string& s : f) parts.push_back(quote_text(s));
    line(n, fmt::format("[{}]", fmt::join(parts, ", ")), d);
  }
  template <class T>
  void table_array(const char* name, std::vector<T>& f, size_t, const char* doc) {
    deferred_ += fmt::format("# {}\n", doc);
    for (T& item : f) {
      TomlWriter child(join_path(prefix_, name));
      describe(child, item);
      deferred_ += fmt::format("[[{}]]\n{}", join_path(prefix_, name), child.str());
    }
  }

 private:
  void line(const char* name, const std::string& value, const char* doc) {
    out_ += fmt::format("{} = {}  # {}\n", name, value, doc);
  }
  std::string prefix_;
  std::string out_;
  std::string deferred_;  // arrays of tables must follow the section's plain keys
};

// Emits the markdown reference (docs/config.md).
class DocWriter {
 public:
  explicit DocWriter(std::string prefix = "") : prefix_(std::move(prefix)) {}
  std::string str() const { return out_ + deferred_; }

  template <class T>
  void section(const char* name, const char* doc, T& c) {
    DocWriter child(join_path(prefix_, name));
    describe(child, c);
    out_ +=
        fmt::format("\n## [{}]\n\n{}\n\n{}{}", join_path(prefix_, name), doc, kHeader, child.str());
  }
  void integer(const char* n, int64_t&, int64_t def, int64_t lo, int64_t hi, const char* d) {
    row(n, "integer", fmt::format("{}", def), fmt::format("{} .. {}", lo, hi), d);
  }
  void number(const char* n, double&, double def, double lo, double hi, const char* d) {
    row(n, "number", float_text(def), fmt::format("{} .. {}", float_text(lo), float_text(hi)), d);
  }
  void boolean(const char* n, bool&, bool def, const char* d) {
    row(n, "boolean", def ? "true" : "false", "", d);
  }
  void text(const char* n, std::string&, const char* def, const char* d) {
    row(n, "string", quote_text(def), "", d);
  }
  void choice(const char* n, std::string&, const char* def, const std::vector<std::string>& opts,
              const char* d) {
    row(n, "string", quote_text(def), fmt::format("{}", fmt::join(opts, ", ")), d);
  }
  void numbers(const char* n, std::vector<double>&, const std::vector<double>& def, double lo,
               double hi, bool may_be_empty, const char* d) {
    std::vector<std::string> parts;
    for (double x : def) parts.push_back(float_text(x));
    row(n, "array of numbers", fmt::format("[{}]", fmt::join(parts, ", ")),
        fmt::format("each {} .. {}{}", float_text(lo), float_text(hi),
                    may_be_empty ? "; may be empty" : ""),
        d);
  }
  void choices(const char* n, std::vector<std::string>&, const std::vector<std::string>& def,
               const std::vector<std::string>& opts, const char* d) {
    row(n, "array of strings", fmt::format("[{}]", fmt::join(def, ", ")),
        fmt::format("distinct, from {}", fmt::join(opts, ", ")), d);
  }
  template <class T>
  void table_array(const char* name, std::vector<T>&, size_t count, const char* doc) {
    row(name, "array of tables", fmt::format("{} table(s) with the defaults below", count), "",
        doc);
    T item;
    DocWriter child(join_path(prefix_, name));
    describe(child, item);
    deferred_ +=
        fmt::format("\n### [[{}]]\n\n{}{}", join_path(prefix_, name), kHeader, child.str());
  }

 private:
  static constexpr const char* kHeader =
      "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  void row(const char* n, const char* type, const std::string& def, const std::string& allowed,
           const char* doc) {
    out_ += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", n, type, def, allowed, doc);
  }
  std::string prefix_;
  std::string out_;
  std::string deferred_;
};

}  // namespace

std::string to_toml(const JobConfig& config) {
  JobConfig copy = config;  // the visitors take fields by reference
  TomlWriter writer;
  describe(writer, copy);
  return "# saccade job config, resolved (every key, defaults filled in)\n" + writer.str();
}

std::string config_reference_markdown() {
  JobConfig dummy;
  DocWriter writer;
  describe(writer, dummy);
  return "# Configuration reference\n\n"
         "Generated by `saccade config docs` from common/config_schema.h, the one place where "
         "keys,\n"
         "defaults and ranges are declared. A job is one TOML file; every key is optional.\n"
         "Unknown keys, wrong types and out-of-range values are refused before anything starts,\n"
         "with the file, line, key path and what was expected.\n\n"
         "A file may start from another: a top-level `include = \"base.toml\"` (a path relative "
         "to the\n"
         "including file's folder) reads that config first, then merges this file's keys over "
         "it.\n"
         "Tables merge key by key; any other value replaces the base's, arrays of tables such "
         "as\n"
         "`[[cluster.nodes]]` as a whole. A base may include another (at most 16 deep; a cycle "
         "is\n"
         "refused), and a problem in a base is reported at the base's file and line. "
         "`saccade config\n"
         "show FILE` prints the merged result; what a job runs and ships to its nodes is that "
         "result,\n"
         "so only the launching node reads the files.\n" +
         writer.str();
}

}  // namespace saccade

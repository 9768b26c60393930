// A strict little JSON reader for checking `saccade status --json` output:
// objects, arrays, strings (with escapes), numbers, true/false/null. Throws
// std::runtime_error with the offset of the first thing it cannot read.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace saccade::testing {

struct Json {
  using Object = std::map<std::string, Json>;
  using Array = std::vector<Json>;
  std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>>
      value;

  const Json& operator[](const std::string& key) const {
    const auto& o = *std::get<std::shared_ptr<Object>>(value);
    auto it = o.find(key);
    if (it == o.end()) throw std::runtime_error("no key " + key);
    return it->second;
  }
  const Array& array() const { return *std::get<std::shared_ptr<Array>>(value); }
  const std::string& str() const { return std::get<std::string>(value); }
  double num() const { return std::get<double>(value); }
  bool boolean() const { return std::get<bool>(value); }
  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value); }
};

class JsonReader {
 public:
  static Json parse(const std::string& text) {
    JsonReader r(text);
    Json v = r.value();
    r.skip();
    if (r.i_ != text.size()) r.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(const std::string& t) : t_(t) {}
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error("JSON: " + std::string(what) + " at offset " + std::to_string(i_));
  }
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail("unexpected character");
  }
  bool word(const char* w) {
    const std::string s(w);
    if (t_.compare(i_, s.size(), s) != 0) return false;
    i_ += s.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < t_.size() && t_[i_] != '"') {
      char c = t_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c == '\\') {
        if (i_ >= t_.size()) fail("bad escape");
        const char e = t_[i_++];
        if (e == 'u') {
          if (i_ + 4 > t_.size()) fail("bad \\u escape");
          out += static_cast<char>(std::stoi(t_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          continue;
        }
        const std::string from = "\"\\/bfnrt", to = "\"\\/\b\f\n\r\t";
        const size_t k = from.find(e);
        if (k == std::string::npos) fail("bad escape");
        c = to[k];
      }
      out += c;
    }
    expect('"');
    return out;
  }
  Json value() {
    skip();
    if (i_ >= t_.size()) fail("unexpected end");
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      auto o = std::make_shared<Json::Object>();
      if (!eat('}')) {
        do {
          skip();
          std::string k = string();
          expect(':');
          (*o)[k] = value();
        } while (eat(','));
        expect('}');
      }
      return {o};
    }
    if (c == '[') {
      ++i_;
      auto a = std::make_shared<Json::Array>();
      if (!eat(']')) {
        do a->push_back(value());
        while (eat(','));
        expect(']');
      }
      return {a};
    }
    if (c == '"') return {string()};
    if (word("true")) return {true};
    if (word("false")) return {false};
    if (word("null")) return {nullptr};
    size_t used = 0;
    double d;
    try {
      d = std::stod(t_.substr(i_, 40), &used);
    } catch (...) {
      fail("not a value");
    }
    i_ += used;
    return {d};
  }
  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace saccade::testing

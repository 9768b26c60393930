#include "model/safetensors_json.h"

#include <limits>
#include <stdexcept>
#include <utility>

namespace saccade::model::detail {

void fail(const std::string& what) {
  throw std::runtime_error("safetensors: " + what);
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

namespace {

// A recursive-descent reader for exactly the safetensors header grammar.
class HeaderReader {
 public:
  explicit HeaderReader(std::string_view text) : s_(text) {}

  void read(RawTensorMap& tensors, std::vector<HeaderEntry>& offsets, Metadata* metadata) {
    skip_ws();
    expect('{', "header to start with '{'");
    skip_ws();
    if (peek() == '}') {
      ++i_;
    } else {
      while (true) {
        skip_ws();
        std::string name = read_string();
        skip_ws();
        expect(':', "':' after \"" + name + "\"");
        skip_ws();
        if (name == "__metadata__") {
          read_metadata(metadata);
        } else {
          if (tensors.count(name)) fail("duplicate tensor name \"" + name + "\"");
          RawTensor t;
          auto range = read_tensor(name, t);
          tensors.emplace(name, std::move(t));
          offsets.emplace_back(name, range);
        }
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}', "',' or '}' in the header object");
        break;
      }
    }
    skip_ws();
    if (i_ != s_.size())
      fail("trailing bytes after the header object at offset " + std::to_string(i_));
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c, const std::string& what) {
    if (peek() != c || i_ >= s_.size())
      fail("malformed header JSON: expected " + what + " at offset " + std::to_string(i_));
    ++i_;
  }

  std::string read_string() {
    expect('"', "a string");
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("malformed header JSON: unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("malformed header JSON: control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      const char e = peek();
      ++i_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, read_code_point());
          break;
        default:
          fail("malformed header JSON: bad escape in a string");
      }
    }
  }

  uint32_t read_hex4() {
    if (i_ + 4 > s_.size()) fail("malformed header JSON: short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        fail("malformed header JSON: bad \\u escape");
    }
    return v;
  }
  uint32_t read_code_point() {
    uint32_t cp = read_hex4();
    if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
      if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u')
        fail("malformed header JSON: lone surrogate");
      i_ += 2;
      const uint32_t lo = read_hex4();
      if (lo < 0xDC00 || lo >= 0xE000) fail("malformed header JSON: bad surrogate pair");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      fail("malformed header JSON: lone surrogate");
    }
    return cp;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint64_t read_uint(const std::string& what) {
    if (peek() == '-') fail(what + ": negative number");
    if (peek() < '0' || peek() > '9') fail(what + ": expected a non-negative integer");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(s_[i_++] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10)
        fail(what + ": integer overflow");
      v = v * 10 + digit;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E') fail(what + ": expected an integer");
    return v;
  }

  std::vector<uint64_t> read_uint_array(const std::string& what) {
    expect('[', "'[' for " + what);
    std::vector<uint64_t> out;
    skip_ws();
    if (peek() == ']') {
      ++i_;
      return out;
    }
    while (true) {
      skip_ws();
      out.push_back(read_uint(what));
      if (out.size() > 64) fail(what + ": more than 64 entries");
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']', "',' or ']' in " + what);
      return out;
    }
  }

  void read_metadata(Metadata* metadata) {
    expect('{', "an object for __metadata__");
    skip_ws();
    if (peek() == '}') {
      ++i_;
      return;
    }
    while (true) {
      skip_ws();
      std::string key = read_string();
      skip_ws();
      expect(':', "':' in __metadata__");
      skip_ws();
      if (peek() != '"') fail("__metadata__[\"" + key + "\"]: expected a string value");
      std::string value = read_string();
      if (metadata) (*metadata)[key] = std::move(value);
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}', "',' or '}' in __metadata__");
      return;
    }
  }

  std::pair<uint64_t, uint64_t> read_tensor(const std::string& name, RawTensor& t) {
    expect('{', "an object for tensor \"" + name + "\"");
    bool has_dtype = false, has_shape = false, has_offsets = false;
    std::pair<uint64_t, uint64_t> range{0, 0};
    skip_ws();
    while (peek() != '}') {
      skip_ws();
      const std::string field = read_string();
      skip_ws();
      expect(':', "':' in tensor \"" + name + "\"");
      skip_ws();
      const std::string where = "tensor \"" + name + "\" " + field;
      if (field == "dtype") {
        const std::string d = read_string();
        try {
          t.dtype = dtype_from_name(d);
        } catch (const std::invalid_argument&) {
          fail(where + ": unknown dtype \"" + d + "\"");
        }
        has_dtype = true;
      } else if (field == "shape") {
        for (uint64_t d : read_uint_array(where)) {
          if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail(where + ": too large");
          t.shape.push_back(static_cast<int64_t>(d));
        }
        has_shape = true;
      } else if (field == "data_offsets") {
        const auto o = read_uint_array(where);
        if (o.size() != 2) fail(where + ": expected [begin, end]");
        range = {o[0], o[1]};
        has_offsets = true;
      } else {
        fail("tensor \"" + name + "\": unknown field \"" + field + "\"");
      }
      skip_ws();
      if (peek() == ',')
        ++i_;
      else if (peek() != '}')
        fail("malformed header JSON in tensor \"" + name + "\"");
      skip_ws();
    }
    ++i_;
    if (!has_dtype || !has_shape || !has_offsets)
      fail("tensor \"" + name + "\": expected dtype, shape and data_offsets");
    return range;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

void read_safetensors_header(std::string_view json, RawTensorMap& tensors,
                             std::vector<HeaderEntry>& offsets, Metadata* metadata) {
  HeaderReader(json).read(tensors, offsets, metadata);
}

}  // namespace saccade::model::detail

#include "model/safetensors_json.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

namespace saccade::model::detail {
namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order for the error messages

std::vector<uint64_t> uint_array(const Json& v, const std::string& what) {
  if (!v.is_array()) fail(what + ": expected an array");
  if (v.size() > 64) fail(what + ": more than 64 entries");
  std::vector<uint64_t> out;
  for (const Json& e : v) {
    if (e.is_number_integer() && e.get<int64_t>() < 0) fail(what + ": negative number");
    if (!e.is_number_unsigned() && !e.is_number_integer())
      fail(what + ": expected a non-negative integer");
    out.push_back(e.get<uint64_t>());
  }
  return out;
}

std::pair<uint64_t, uint64_t> read_tensor(const std::string& name, const Json& v, RawTensor& t) {
  if (!v.is_object()) fail("tensor \"" + name + "\": expected an object");
  for (const auto& [field, value] : v.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      fail("tensor \"" + name + "\": unknown field \"" + field + "\"");
  }
  if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    fail("tensor \"" + name + "\": expected dtype, shape and data_offsets");
  const Json& dtype = v["dtype"];
  if (!dtype.is_string()) fail("tensor \"" + name + "\" dtype: expected a string");
  try {
    t.dtype = dtype_from_name(dtype.get<std::string>());
  } catch (const std::invalid_argument&) {
    fail("tensor \"" + name + "\" dtype: unknown dtype \"" + dtype.get<std::string>() + "\"");
  }
  for (uint64_t d : uint_array(v["shape"], "tensor \"" + name + "\" shape")) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("tensor \"" + name + "\" shape: too large");
    t.shape.push_back(static_cast<int64_t>(d));
  }
  const auto o = uint_array(v["data_offsets"], "tensor \"" + name + "\" data_offsets");
  if (o.size() != 2) fail("tensor \"" + name + "\" data_offsets: expected [begin, end]");
  return {o[0], o[1]};
}

}  // namespace

void fail(const std::string& what) {
  throw std::runtime_error("safetensors: " + what);
}

void read_safetensors_header(std::string_view text, RawTensorMap& tensors,
                             std::vector<HeaderEntry>& offsets, Metadata* metadata) {
  // nlohmann keeps the last of duplicate keys: the callback sees every top-level key.
  std::set<std::string> seen;
  std::string duplicate;
  const Json::parser_callback_t note_keys = [&](int depth, Json::parse_event_t event,
                                                Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), note_keys);
  } catch (const Json::parse_error& e) {
    const std::string what = e.what();
    if (what.find("; expected end of input") != std::string::npos)  // not "unexpected end"
      fail("trailing bytes after the header object at offset " + std::to_string(e.byte - 1));
    fail("malformed header JSON: " + what);
  } catch (const Json::exception& e) {  // a number out of double's range ("1e999")
    fail(std::string("malformed header JSON: ") + e.what());
  }
  if (!header.is_object()) fail("malformed header JSON: expected the header to start with '{'");
  if (!duplicate.empty()) fail("duplicate tensor name \"" + duplicate + "\"");
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("malformed header JSON: expected an object for __metadata__");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) fail("__metadata__[\"" + key + "\"]: expected a string value");
        if (metadata) (*metadata)[key] = v.get<std::string>();
      }
      continue;
    }
    RawTensor t;
    const auto range = read_tensor(name, value, t);
    tensors.emplace(name, std::move(t));
    offsets.emplace_back(name, range);
  }
}

}  // namespace saccade::model::detail

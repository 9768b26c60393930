#include "tests/coordinator/odd_envelopes.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/schema.h>

#include <algorithm>
#include <limits>

namespace saccade::testing {
namespace {

using capnp::DynamicList;
using capnp::DynamicStruct;
using capnp::StructSchema;

// Bytes of texts, data and list elements one envelope may hold: most frames stay under
// the tests' cluster.max_message_bytes (64 KiB); the rest are refused whole, as they should.
constexpr size_t kBudget = 48 * 1024;
constexpr int kMaxDepth = 3;  // structs in lists in structs...

// Words the runtime gives meaning to: stages, roles, devices, endpoints, blob names.
constexpr const char* kWords[] = {"pretrain",
                                  "probe",
                                  "policy",
                                  "eval",
                                  "learner",
                                  "data",
                                  "cpu",
                                  "cuda:99",
                                  "cuda:-1",
                                  "n0",
                                  "n1",
                                  "rt-test",
                                  "teacher",
                                  "weights",
                                  "state",
                                  "tcp://127.0.0.1:1",
                                  "ipc:///nonexistent/x",
                                  "tcp://*:0",
                                  "%s%n{}",
                                  "../x"};

struct Filler {
  std::mt19937_64& rng;
  size_t budget = kBudget;

  uint64_t pick(uint64_t n) { return rng() % n; }

  template <typename T>
  T odd_int() {
    using L = std::numeric_limits<T>;
    switch (pick(8)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return static_cast<T>(-1);  // the maximum of an unsigned type
      case 3:
        return L::max();
      case 4:
        return L::min();
      case 5:
        return static_cast<T>(L::max() - 1);
      case 6:
        return static_cast<T>(pick(4));  // small: passes range checks, hits indices
      default:
        return static_cast<T>(rng());
    }
  }

  double odd_float() {
    using L = std::numeric_limits<double>;
    switch (pick(9)) {
      case 0:
        return 0.0;
      case 1:
        return -0.0;
      case 2:
        return -1.0;
      case 3:
        return L::quiet_NaN();
      case 4:
        return L::infinity();
      case 5:
        return -L::infinity();
      case 6:
        return L::max();
      case 7:
        return L::denorm_min();
      default:
        return std::uniform_real_distribution<double>(-2.0, 2.0)(rng);
    }
  }

  // A length for a text, data or list of `unit`-byte elements, within what is left.
  size_t length(size_t unit) {
    static constexpr size_t kLengths[] = {0, 1, 2, 3, 17, 300, 5000};
    const size_t n = std::min(kLengths[pick(std::size(kLengths))], budget / unit);
    budget -= n * unit;
    return n;
  }

  std::string odd_text() {
    switch (pick(7)) {
      case 0:
        return "";
      case 1:
        return "\xff\xfe\x80 not UTF-8 \xc3";
      case 2:
        return std::string("embedded\0nul", 12);
      case 3:
        return std::string(length(1), 'x');
      case 4:
        return std::to_string(static_cast<int64_t>(rng()));
      default:
        return kWords[pick(std::size(kWords))];
    }
  }

  std::string odd_bytes() {
    std::string s(length(1), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }

  // Calls `set` with an odd value when `t` is a scalar, text, data or enum type.
  template <typename Set>
  bool scalar(capnp::Type t, Set&& set) {
    using W = capnp::schema::Type;
    switch (t.which()) {
      case W::VOID:
        set(capnp::VOID);
        return true;
      case W::BOOL:
        set(pick(2) == 1);
        return true;
      case W::INT8:
        set(odd_int<int8_t>());
        return true;
      case W::INT16:
        set(odd_int<int16_t>());
        return true;
      case W::INT32:
        set(odd_int<int32_t>());
        return true;
      case W::INT64:
        set(odd_int<int64_t>());
        return true;
      case W::UINT8:
        set(odd_int<uint8_t>());
        return true;
      case W::UINT16:
        set(odd_int<uint16_t>());
        return true;
      case W::UINT32:
        set(odd_int<uint32_t>());
        return true;
      case W::UINT64:
        set(odd_int<uint64_t>());
        return true;
      case W::FLOAT32:
        set(static_cast<float>(odd_float()));
        return true;
      case W::FLOAT64:
        set(odd_float());
        return true;
      case W::TEXT: {
        const std::string s = odd_text();
        set(capnp::Text::Reader(s.c_str(), s.size()));
        return true;
      }
      case W::DATA: {
        const std::string s = odd_bytes();
        set(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size()));
        return true;
      }
      case W::ENUM: {
        const capnp::EnumSchema e = t.asEnum();
        const auto n = static_cast<uint16_t>(e.getEnumerants().size());
        const uint16_t raw =
            pick(4) == 0 ? (pick(2) == 0 ? n : uint16_t{65535}) : static_cast<uint16_t>(pick(n));
        set(capnp::DynamicEnum(e, raw));
        return true;
      }
      default:
        return false;
    }
  }

  void fill(DynamicStruct::Builder s, int depth) {
    const StructSchema schema = s.getSchema();
    for (const StructSchema::Field f : schema.getNonUnionFields()) field(s, f, depth);
    const auto variants = schema.getUnionFields();
    if (variants.size() > 0)
      field(s, variants[static_cast<unsigned>(pick(variants.size()))], depth);
  }

  // Bytes an element of a list of `t` takes (at least a word), for the budget.
  static size_t element_bytes(capnp::Type t) {
    if (!t.isStruct()) return 8;
    const auto layout = t.asStruct().getProto().getStruct();
    return 8 * std::max<size_t>(1, layout.getDataWordCount() + layout.getPointerCount());
  }

  void field(DynamicStruct::Builder s, StructSchema::Field f, int depth) {
    if (f.getProto().isGroup()) return fill(s.init(f).as<DynamicStruct>(), depth);
    const capnp::Type t = f.getType();
    if (scalar(t, [&](const capnp::DynamicValue::Reader& v) { s.set(f, v); })) return;
    if (t.isStruct() && depth < kMaxDepth) fill(s.init(f).as<DynamicStruct>(), depth + 1);
    if (t.isList() && depth < kMaxDepth) {
      const size_t n = length(element_bytes(t.asList().getElementType()));
      list(s.init(f, static_cast<unsigned>(n)).as<DynamicList>(), depth + 1);
    }
  }

  void list(DynamicList::Builder l, int depth) {
    const capnp::Type e = l.getSchema().getElementType();
    for (unsigned i = 0; i < l.size(); ++i) {
      if (scalar(e, [&](const capnp::DynamicValue::Reader& v) { l.set(i, v); })) continue;
      if (e.isStruct() && depth < kMaxDepth) fill(l[i].as<DynamicStruct>(), depth + 1);
      if (e.isList() && depth < kMaxDepth) {
        const size_t n = length(element_bytes(e.asList().getElementType()));
        list(l.init(i, static_cast<unsigned>(n)).as<DynamicList>(), depth + 1);
      }
    }
  }
};

}  // namespace

OddEnvelopes::OddEnvelopes(uint64_t seed, wire::SenderInfo as, uint32_t pid)
    : as_(std::move(as)), pid_(pid), rng_(seed) {}

zmq::message_t OddEnvelopes::make(uint64_t generation,
                                  const std::vector<wire::Envelope::Body::Which>& except) {
  std::vector<StructSchema::Field> kinds;
  for (const StructSchema::Field f : capnp::Schema::from<wire::Envelope::Body>().getUnionFields()) {
    const auto kind = static_cast<wire::Envelope::Body::Which>(f.getProto().getDiscriminantValue());
    if (std::find(except.begin(), except.end(), kind) == except.end()) kinds.push_back(f);
  }
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<DynamicStruct>(capnp::Schema::from<wire::Envelope>());
  Filler filler{rng_};
  for (const StructSchema::Field f : root.getSchema().getNonUnionFields())
    if (!f.getProto().isGroup()) filler.field(root, f, 0);
  filler.field(root.init("body").as<DynamicStruct>(), kinds[filler.pick(kinds.size())], 0);
  if (rng_() % 8 != 0) {  // the header of the peer it claims to be, so the body is read
    wire::Envelope::Builder env = builder.getRoot<wire::Envelope>();
    env.setJobId(as_.job_id);
    env.setVersion(wire::PROTOCOL_VERSION);
    env.setGeneration(generation);
    env.setLaunch("");
    wire::Sender::Builder s = env.getSender();
    s.setRole(as_.role);
    s.setRank(as_.rank);
    s.setNode(as_.node);
    s.setPid(pid_);
    s.setIncarnation(wire::process_incarnation());  // as this process's envelope writers
  }
  return wire::to_zmq(builder);
}

}  // namespace saccade::testing

#include "workers/runtime/request_server.h"

#include <fmt/format.h>

#include <filesystem>

namespace saccade::runtime {

namespace {

constexpr int64_t kPollMs = 50;  // idle wait between calls of stopping()

// The socket file of an ipc:// endpoint (what follows the scheme).
std::string ipc_socket_path(const std::string& endpoint) {
  return endpoint.substr(endpoint.find("://") + 3);
}

}  // namespace

bool Exchange::reply(const std::function<void(wire::Envelope::Builder)>& fill) {
  zmq::message_t frame = server_.writer_.make(0, fill);
  zmq::message_t id;
  id.copy(identity_);
  return server_.router_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)
             .has_value() &&
         server_.router_.send(frame, zmq::send_flags::dontwait).has_value();
}

void Exchange::refuse(const std::string& why) {
  server_.refuse(sender_, why);
}

RequestServer::RequestServer(RequestServerOptions options)
    : options_(std::move(options)),
      router_(context_, zmq::socket_type::router),
      writer_(options_.sender) {
  // The ZAP handler binds before any CURVE socket (RFC 27).
  if (options_.security.curve) zap_.emplace(context_, options_.security.client.public_key);
  control::configure_server(router_, options_.security);
  if (options_.expect.max_frame_bytes > 0)
    router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.expect.max_frame_bytes));
  bound_ = control::bind_router(router_, options_.endpoint);
  if (!options_.local_endpoint.empty()) {
    // libzmq replaces a socket file left by a dead predecessor; the folder must exist.
    std::filesystem::create_directories(
        std::filesystem::path(ipc_socket_path(options_.local_endpoint)).parent_path());
    router_.bind(options_.local_endpoint);
    bound_local_ = options_.local_endpoint;
  }
}

RequestServer::~RequestServer() {
  router_.close();
  if (bound_local_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove(ipc_socket_path(bound_local_), ignored);
}

void RequestServer::refuse(const std::string& from, const std::string& why) {
  ++dropped_;
  drops_.refused(from, why);
}

void RequestServer::serve(const std::function<bool()>& stopping,
                          const std::function<void(Exchange&)>& handle) {
  while (!stopping()) {
    std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zap_) items.push_back({zap_->socket().handle(), 0, ZMQ_POLLIN, 0});
    control::poll_interruptible(items.data(), items.size(), std::chrono::milliseconds(kPollMs));
    if (zap_ && (items[1].revents & ZMQ_POLLIN)) zap_->handle_one();
    if (!(items[0].revents & ZMQ_POLLIN)) continue;

    // One message per turn, so stopping() is asked between requests.
    std::optional<control::RoutedFrame> routed = control::recv_routed(router_, options_.expect);
    if (!routed) continue;
    wire::Received& r = routed->received;
    if (r.status != wire::RecvStatus::kOk) {
      refuse(routed->from, r.why);
      continue;
    }
    const auto from = r.message->envelope().getSender();
    Exchange exchange(*this, routed->identity, *r.message,
                      fmt::format("{} {}", control::role_name(from.getRole()), from.getRank()));
    handle(exchange);
  }
}

}  // namespace saccade::runtime

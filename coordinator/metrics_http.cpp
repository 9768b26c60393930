#include "coordinator/metrics_http.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "control/control.h"

namespace saccade::coordinator {

MetricsHttp::MetricsHttp(zmq::context_t& context, const std::string& endpoint)
    : socket_(context, zmq::socket_type::stream) {
  socket_.set(zmq::sockopt::linger, 0);
  control::bind_router(socket_, endpoint);
}

void MetricsHttp::serve(const std::function<std::string()>& body) {
  for (int i = 0; i < 100; ++i) {
    zmq::message_t id, data;
    if (!socket_.recv(id, zmq::recv_flags::dontwait)) return;
    if (!socket_.recv(data, zmq::recv_flags::dontwait) || data.size() == 0) continue;
    const std::string text = body();
    const std::string response = fmt::format(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: "
        "{}\r\nConnection: close\r\n\r\n{}",
        text.size(), text);
    const std::string peer = id.to_string();  // sending a message_t empties it
    try {
      socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(response), zmq::send_flags::dontwait);
      socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
      socket_.send(zmq::message_t(), zmq::send_flags::dontwait);  // closes the connection
    } catch (const zmq::error_t& e) {  // the client left before its answer
      spdlog::debug("metrics reply: {}", e.what());
    }
  }
}

}  // namespace saccade::coordinator

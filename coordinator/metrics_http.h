// The coordinator's Prometheus endpoint: minimal HTTP/1.0 on a ZMQ_STREAM
// socket (any request gets the current metrics, then the connection closes),
// so the coordinator's one poll loop serves it without a thread or a web server.
// Internal to coordinator/.
#pragma once

#include <functional>
#include <string>

#include <zmq.hpp>

namespace saccade::coordinator {

class MetricsHttp {
 public:
  // Binds `endpoint` (tcp://HOST:PORT) on `context`, which must outlive this.
  // Throws naming the endpoint when the port is taken.
  MetricsHttp(zmq::context_t& context, const std::string& endpoint);

  zmq::socket_t& socket() { return socket_; }  // for the caller's poll
  // Answers every request waiting (up to 100) with `body()` as text/plain.
  void serve(const std::function<std::string()>& body);

 private:
  zmq::socket_t socket_;
};

}  // namespace saccade::coordinator

// Serves a metrics Registry over HTTP: GET /metrics answers the Prometheus text
// format. `routes`, when given, adds more handlers to the same server before it
// listens (the coordinator's dashboard); every other path is 404. Runs
// cpp-httplib's accept loop on one background thread and its handlers on
// httplib's default pool, or with `routes` on a pool of kHandlerThreads
// (the dashboard's streamed responses hold one each while they last).
//
//   metrics::HttpServer http(&registry);
//   LOOM_ASSIGN_OR_RETURN(int port, http.Start("127.0.0.1", 0));  // 0: any free port
//   ...
//   http.Stop();  // also done by the destructor
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "runtime/service/metrics/metrics.h"

namespace httplib {
class Server;
}

namespace loom::runtime::service::metrics {

inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

inline constexpr int kHandlerThreads = 32;

class HttpServer {
 public:
  using Routes = std::function<void(httplib::Server&)>;
  explicit HttpServer(const Registry* registry, Routes routes = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 picks a free one) and serves in the background.
  // Returns the bound port. Fails with Unavailable when the bind fails.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  const Registry* registry_;
  Routes routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace loom::runtime::service::metrics

#include "runtime/service/metrics/http_server.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace loom::runtime::service::metrics {

HttpServer::HttpServer(const Registry* registry, Routes routes) : registry_(registry), routes_(std::move(routes)) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  if (server_) return absl::FailedPreconditionError("metrics http server already started");
  auto server = std::make_unique<httplib::Server>();
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a
  // second server silently share a port that is in use).
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (routes_) server->new_task_queue = [] { return new httplib::ThreadPool(kHandlerThreads); };
  const Registry* reg = registry_;
  server->Get("/metrics", [reg](const httplib::Request&, httplib::Response& res) {
    res.set_content(reg->Render(), kTextContentType);
  });
  if (routes_) routes_(*server);
  int bound = port;
  if (port == 0) {
    bound = server->bind_to_any_port(host.c_str());
  } else if (!server->bind_to_port(host.c_str(), port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", host, ":", port));
  }
  server_ = std::move(server);
  httplib::Server* s = server_.get();
  thread_ = std::thread([s] { s->listen_after_bind(); });
  // stop() is a no-op until the loop runs: wait for it so Stop() cannot hang.
  while (!s->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void HttpServer::Stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace loom::runtime::service::metrics

#include "runtime/service/dashboard/static_routes.h"

#include <string>

#include "runtime/service/dashboard/assets.h"

namespace loom::runtime::service::dashboard {
namespace {

void Send(const Asset& a, httplib::Response& res) {
  res.set_content(reinterpret_cast<const char*>(a.data), a.size, a.content_type);
}

}  // namespace

void AddStaticRoutes(httplib::Server& server) {
  server.set_default_headers({
      {"Content-Security-Policy", kContentSecurityPolicy},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-store"},
  });
  auto shell = [](const httplib::Request&, httplib::Response& res) {
    const Asset* index = FindAsset("index.html");
    if (index == nullptr) {
      res.status = 404;
      return;
    }
    Send(*index, res);
  };
  server.Get("/", shell);
  server.Get("/ui/.*", shell);
  server.Get("/ui", shell);
  server.Get("/static/(.+)", [](const httplib::Request& req, httplib::Response& res) {
    const Asset* a = FindAsset(req.matches[1].str());
    if (a == nullptr) {
      res.status = 404;
      res.set_content("not found\n", "text/plain; charset=utf-8");
      return;
    }
    Send(*a, res);
  });
}

}  // namespace loom::runtime::service::dashboard

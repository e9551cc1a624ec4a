#include "runtime/service/dashboard/static_routes.h"

#include <string>

#include <gtest/gtest.h>

#include "runtime/service/dashboard/assets.h"
#include "runtime/service/metrics/http_server.h"

namespace loom::runtime::service::dashboard {
namespace {

class StaticRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http_ = std::make_unique<metrics::HttpServer>(&registry_, [](httplib::Server& s) { AddStaticRoutes(s); });
    auto port = http_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }
  static void ExpectSecurityHeaders(const httplib::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->get_header_value("Content-Security-Policy"), kContentSecurityPolicy);
    EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(r->get_header_value("Referrer-Policy"), "no-referrer");
    EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store");
  }
  static std::string Bytes(const char* path) {
    const Asset* a = FindAsset(path);
    return std::string(reinterpret_cast<const char*>(a->data), a->size);
  }

  metrics::Registry registry_;
  std::unique_ptr<metrics::HttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(StaticRoutesTest, ShellAtRootAndEveryUiPath) {
  for (const char* path : {"/", "/ui", "/ui/", "/ui/jobs/job-1", "/ui/agents"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8") << path;
    EXPECT_EQ(r->body, Bytes("index.html")) << path;
    ExpectSecurityHeaders(r);
  }
}

TEST_F(StaticRoutesTest, AssetsWithTheirContentType) {
  auto js = client_->Get("/static/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->body, Bytes("app.js"));
  ExpectSecurityHeaders(js);
  auto css = client_->Get("/static/app.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");
  EXPECT_EQ(css->body, Bytes("app.css"));
}

TEST_F(StaticRoutesTest, UnknownAssetAndPathAre404WithHeaders) {
  for (const char* path : {"/static/nope.js", "/static/../BUILD.bazel", "/static/", "/elsewhere"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    ExpectSecurityHeaders(r);
  }
}

TEST_F(StaticRoutesTest, MetricsStillServed) {
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ExpectSecurityHeaders(r);
}

// The shell has no inline script or style (the CSP would block them).
TEST(StaticShell, NoInlineScriptOrStyle) {
  const Asset* a = FindAsset("index.html");
  ASSERT_NE(a, nullptr);
  const std::string html(reinterpret_cast<const char*>(a->data), a->size);
  EXPECT_EQ(html.find("style="), std::string::npos);
  EXPECT_EQ(html.find("<style"), std::string::npos);
  EXPECT_EQ(html.find(" on"), std::string::npos) << "no inline event handlers";
  size_t pos = 0;
  while ((pos = html.find("<script", pos)) != std::string::npos) {
    size_t end = html.find('>', pos);
    ASSERT_NE(end, std::string::npos);
    EXPECT_NE(html.substr(pos, end - pos).find(" src="), std::string::npos) << "inline <script> at " << pos;
    EXPECT_EQ(html.compare(end + 1, 9, "</script>"), 0) << "script with a body at " << pos;
    pos = end;
  }
}

}  // namespace
}  // namespace loom::runtime::service::dashboard

// The dashboard's static routes, on a cpp-httplib server (no token needed):
//   GET /, GET /ui/<anything>  -> index.html (the single-page app's shell)
//   GET /static/<file>         -> the embedded asset (assets.h), 404 if unknown
// and the security headers every response of the server carries
// (kSecurityHeaders: CSP without inline scripts or styles, nosniff, no
// referrer, no caching).
#pragma once

#include <httplib.h>

namespace loom::runtime::service::dashboard {

inline constexpr char kContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// Sets the default headers of `server` (every response, errors too) and adds
// the static routes.
void AddStaticRoutes(httplib::Server& server);

}  // namespace loom::runtime::service::dashboard

#include "runtime/service/auth/token.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace loom::runtime::service::auth {
namespace {

constexpr int kTokenBytes = 32;

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, bool check_mode) {
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0) return absl::NotFoundError(absl::StrCat("token: no file ", path));
  if (check_mode && (sb.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("token: ", path, " is readable by group or others; chmod 600 it"));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string tok(absl::StripAsciiWhitespace(ss.str()));
  if (tok.empty()) return absl::FailedPreconditionError(absl::StrCat("token: ", path, " is empty"));
  return tok;
}

absl::StatusOr<std::string> RandomHex(int nbytes) {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("token: cannot open /dev/urandom: ", std::strerror(errno)));
  std::string raw(nbytes, '\0');
  int got = 0;
  while (got < nbytes) {
    ssize_t n = ::read(fd, &raw[got], nbytes - got);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      ::close(fd);
      return absl::UnavailableError("token: short read from /dev/urandom");
    }
    got += static_cast<int>(n);
  }
  ::close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

std::string DefaultDataDir() {
  if (const char* d = std::getenv("LOOM_DATA_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.loom";
  return ".loom";
}

absl::StatusOr<std::string> LoadOrCreateToken(const std::string& data_dir, const char* file) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("data_dir: cannot create '", data_dir, "': ", ec.message()));
  std::string path = data_dir + "/" + file;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return ReadTokenFile(path, /*check_mode=*/true);
    return absl::UnavailableError(absl::StrCat("token: cannot create ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::string> tok = RandomHex(kTokenBytes);
  std::string line = tok.ok() ? *tok + "\n" : "";
  bool ok = tok.ok() && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return tok.ok() ? absl::UnavailableError(absl::StrCat("token: cannot write ", path)) : tok.status();
  }
  return *tok;
}

absl::StatusOr<std::string> FindClientToken(const std::string& data_dir) {
  if (const char* t = std::getenv("LOOM_TOKEN"); t && *t) return std::string(t);
  std::string dir = data_dir.empty() ? DefaultDataDir() : data_dir;
  std::string path = dir + "/" + kTokenFile;
  auto tok = ReadTokenFile(path, /*check_mode=*/false);
  if (tok.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("no token: set LOOM_TOKEN or make ", path, " readable"));
  }
  return tok;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token) {
  std::string name;
  return CheckAuthorization(metadata, TokenSet({{kDefaultTokenName, token}}), &name);
}

grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const TokenSet& tokens, std::string* name) {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing authorization: Bearer <token> metadata");
  }
  std::string value(it->second.data(), it->second.size());
  constexpr absl::string_view kPrefix = "Bearer ";
  if (value.size() < kPrefix.size() || !absl::EqualsIgnoreCase(value.substr(0, kPrefix.size()), kPrefix)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization metadata is not a Bearer token");
  }
  *name = tokens.NameOf(value.substr(kPrefix.size()));
  if (name->empty()) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token");
  return grpc::Status::OK;
}

std::string TokenSet::NameOf(const std::string& bearer) const {
  std::string found;
  for (const NamedToken& t : tokens_) {
    if (ConstantTimeEquals(bearer, t.token) && found.empty()) found = t.name;
  }
  return found;
}

namespace {

bool ValidTokenName(absl::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool ValidTokenValue(absl::string_view t) {
  if (t.size() < kMinNamedTokenLength) return false;
  for (char c : t) {
    if (c <= 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<NamedToken>> ReadTokensFile(const std::string& path) {
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0) return absl::NotFoundError(absl::StrCat("tokens_file: no file ", path));
  if ((sb.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokens_file: ", path, " is readable by group or others; chmod 600 it"));
  }
  std::ifstream in(path);
  std::vector<NamedToken> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(l, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("tokens_file: ", path, ":", n, ": ", why));
    };
    if (f.size() != 2) return bad(absl::StrCat("expected 'name token', got ", f.size(), " field(s)"));
    if (!ValidTokenName(f[0])) return bad("name: must match [A-Za-z0-9._-]{1,64}");
    if (!ValidTokenValue(f[1])) {
      return bad(absl::StrCat("token of '", f[0], "': must be at least ", kMinNamedTokenLength,
                              " printable characters without spaces"));
    }
    for (const NamedToken& t : out) {
      if (t.name == f[0]) return bad(absl::StrCat("name '", f[0], "' appears twice"));
      if (t.token == f[1]) return bad(absl::StrCat("token of '", f[0], "' is also the token of '", t.name, "'"));
    }
    out.push_back({std::string(f[0]), std::string(f[1])});
  }
  if (out.empty()) return absl::FailedPreconditionError(absl::StrCat("tokens_file: ", path, " holds no token"));
  return out;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : digest) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

std::string BearerOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return "";
  std::string value(it->second.data(), it->second.size());
  constexpr absl::string_view kPrefix = "Bearer ";
  if (value.size() <= kPrefix.size() || !absl::EqualsIgnoreCase(value.substr(0, kPrefix.size()), kPrefix)) return "";
  return value.substr(kPrefix.size());
}

std::string AgentBearer(const std::string& agent_id, const std::string& secret) {
  return absl::StrCat(agent_id, ":", secret);
}

bool SplitAgentBearer(const std::string& bearer, std::string* agent_id, std::string* secret) {
  size_t colon = bearer.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == bearer.size()) return false;
  *agent_id = bearer.substr(0, colon);
  *secret = bearer.substr(colon + 1);
  return true;
}

void AddBearer(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace loom::runtime::service::auth

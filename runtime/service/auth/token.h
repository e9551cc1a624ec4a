// Bearer-token authentication for the coordinator's gRPC services.
//
// The coordinator calls LoadOrCreateToken(data_dir) at start: the first start
// writes 32 random bytes from /dev/urandom, hex-encoded, to <data_dir>/token
// with mode 0600 (created exclusively, fsynced); later starts read it back. A
// token file readable by group or others is refused (FailedPrecondition).
// Clients (the CLI) find the token with FindClientToken: env LOOM_TOKEN first,
// then <data_dir>/token, where data_dir defaults to DefaultDataDir().
//
// Servers check each call's `authorization: Bearer <token>` metadata with
// CheckAuthorization (constant-time compare) and answer UNAUTHENTICATED when it
// is missing or wrong.
#pragma once

#include <map>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace loom::service {

inline constexpr char kTokenFile[] = "token";

// env LOOM_DATA_DIR, else $HOME/.loom, else ./.loom.
std::string DefaultDataDir();

absl::StatusOr<std::string> LoadOrCreateToken(const std::string& data_dir);

// env LOOM_TOKEN if set and non-empty, else the token file in data_dir (empty:
// DefaultDataDir()). NotFound names both places when neither has a token.
absl::StatusOr<std::string> FindClientToken(const std::string& data_dir = "");

// `nbytes` bytes from /dev/urandom, hex-encoded (tokens, per-job secrets).
absl::StatusOr<std::string> RandomHex(int nbytes);

bool ConstantTimeEquals(const std::string& a, const std::string& b);

// OK when `metadata` holds "authorization: Bearer <token>"; UNAUTHENTICATED
// otherwise (the message says whether it was missing or wrong, never the token).
grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token);

// Adds the bearer metadata to a client call.
void AddBearer(grpc::ClientContext* ctx, const std::string& token);

}  // namespace loom::service

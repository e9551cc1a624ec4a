// Bearer-token authentication for the coordinator's gRPC services.
//
// Two tokens live in the coordinator's data folder, each 32 random bytes from
// /dev/urandom, hex-encoded, written with mode 0600 (created exclusively,
// fsynced) at the first start and read back later; a file readable by group or
// others is refused (FailedPrecondition):
//   <data_dir>/token       the user token: JobService only. Clients (the CLI)
//                          find it with FindClientToken: env LOOM_TOKEN first,
//                          then <data_dir>/token (data_dir: DefaultDataDir()).
//   <data_dir>/join-token  the agents' join token: NodeService.RegisterAgent
//                          only, exchanged there for a per-agent secret.
// An agent then calls NodeService with `Bearer <agent id>:<secret>`
// (AgentBearer); the coordinator keeps only the secret's SHA-256.
//
// Servers check each call's `authorization: Bearer <token>` metadata with
// CheckAuthorization (constant-time compare) and answer UNAUTHENTICATED when it
// is missing or wrong.
#pragma once

#include <map>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace loom::runtime::service::auth {

inline constexpr char kTokenFile[] = "token";
inline constexpr char kJoinTokenFile[] = "join-token";

// env LOOM_DATA_DIR, else $HOME/.loom, else ./.loom.
std::string DefaultDataDir();

// <data_dir>/<file> (kTokenFile or kJoinTokenFile), created at the first call.
absl::StatusOr<std::string> LoadOrCreateToken(const std::string& data_dir, const char* file = kTokenFile);

// A token file's content (whitespace stripped). NotFound when it is missing;
// FailedPrecondition when it is empty or, with `check_mode`, readable by group
// or others.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, bool check_mode);

// env LOOM_TOKEN if set and non-empty, else the token file in data_dir (empty:
// DefaultDataDir()). NotFound names both places when neither has a token.
absl::StatusOr<std::string> FindClientToken(const std::string& data_dir = "");

// `nbytes` bytes from /dev/urandom, hex-encoded (tokens, per-job secrets).
absl::StatusOr<std::string> RandomHex(int nbytes);

bool ConstantTimeEquals(const std::string& a, const std::string& b);

// SHA-256 of `data`, hex-encoded.
std::string Sha256Hex(const std::string& data);

// The value after "Bearer " in the call's authorization metadata; empty when
// there is none.
std::string BearerOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// "<agent id>:<secret>", an agent's NodeService bearer value.
std::string AgentBearer(const std::string& agent_id, const std::string& secret);
// Splits an AgentBearer value; false when it is not one.
bool SplitAgentBearer(const std::string& bearer, std::string* agent_id, std::string* secret);

// OK when `metadata` holds "authorization: Bearer <token>"; UNAUTHENTICATED
// otherwise (the message says whether it was missing or wrong, never the token).
grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token);

// Adds the bearer metadata to a client call.
void AddBearer(grpc::ClientContext* ctx, const std::string& token);

}  // namespace loom::runtime::service::auth
